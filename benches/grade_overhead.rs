//! Per-grade overhead on a warm image: one no-op probe through `infradev grade` (Docker
//! executor) against a bare `docker run --rm <image> true`, measured alternately in the same
//! run. Target: the grade takes at most 1.3× the bare container.
//!
//! A second baseline runs the same no-op pytest by hand (`docker run --rm <image> python3 -m
//! pytest test_noop.py`): the work any pytest-based grader must do, so the gap between it and
//! the grade is what InfraDev itself adds (clone, guard, image check, container API, results).
//! A third grade makes 1000 calls into the subject, to price one brokered round trip of the
//! two-sandbox probe phase.
//!
//! `cargo bench --bench grade_overhead` (needs Docker and runners/base-image/build.sh).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Rounds per side; alternated so drift on a shared machine hits both sides alike.
const ROUNDS: usize = 15;
const TARGET_RATIO: f64 = 1.3;
const BASE_IMAGE: &str = "infradev-base:bookworm";

fn main() {
    // `cargo test --all-targets` builds and runs bench targets too; measure only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("grade_overhead: not measuring outside `cargo bench`");
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir().expect("temp dir");
    let (bench_root, repo, head) = setup(&root, scratch.path());
    let grade_with = |probes: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
            .arg("--root")
            .arg(&bench_root)
            .args([
                "grade",
                "--task",
                "bench-noop",
                "--executor",
                "docker",
                "--head",
                &head,
                "--probes",
            ])
            .arg(probes)
            .arg("--repo")
            .arg(&repo)
            .output()
            .expect("run infradev");
        assert_eq!(
            out.status.code(),
            Some(0),
            "the no-op grade must resolve:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let noop_probes = bench_root.join("probes/bench-noop");
    let call_probes = bench_root.join("probes/bench-calls");
    let grade = || grade_with(&noop_probes);
    let grade_calls = || grade_with(&call_probes);
    grade(); // Builds the environment image once: the benchmark is about a warm image.
    let image = env_image();
    let bare = || {
        let ok = Command::new("docker")
            .args(["run", "--rm", "--network", "none", &image, "true"])
            .status()
            .expect("docker run");
        assert!(ok.success());
    };
    bare();
    let mount = format!("{}:/p:ro", bench_root.join("probes/bench-noop").display());
    let by_hand = || {
        let out = Command::new("docker")
            .args(["run", "--rm", "--network", "none", "-v", &mount, &image])
            .args([
                "python3",
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "/p/test_noop.py",
            ])
            .output()
            .expect("docker run pytest");
        assert!(out.status.success());
    };
    by_hand();

    grade_calls();
    let (mut bare_t, mut hand_t, mut grade_t, mut calls_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        bare_t.push(time(bare));
        hand_t.push(time(by_hand));
        grade_t.push(time(grade));
        calls_t.push(time(grade_calls));
    }
    let (b, h, g, c) = (
        median(&mut bare_t),
        median(&mut hand_t),
        median(&mut grade_t),
        median(&mut calls_t),
    );
    let ratio = g.as_secs_f64() / b.as_secs_f64();
    let verdict = if ratio <= TARGET_RATIO {
        "MET"
    } else {
        "MISSED"
    };
    println!("grade_overhead: {ROUNDS} rounds each, warm image {image}");
    let row = |name: &str, m: Duration, all: &[Duration]| {
        println!(
            "  {name:<44} median {:>7.1} ms  p90 {:>7.1} ms",
            ms(m),
            ms(p90(all))
        );
    };
    row("baseline: docker run --rm <image> true", b, &bare_t);
    row("by hand:  docker run --rm <image> pytest no-op", h, &hand_t);
    row("infradev grade (one no-op probe)", g, &grade_t);
    row(
        &format!("infradev grade ({CALLS} brokered calls)"),
        c,
        &calls_t,
    );
    println!("  grade / bare container: {ratio:.2}x (target <= {TARGET_RATIO}x): {verdict}");
    println!(
        "  grade / pytest by hand: {:.2}x (what InfraDev adds to running pytest in a container)",
        g.as_secs_f64() / h.as_secs_f64()
    );
    println!(
        "  probe phase: judge + subject containers and the broker; one brokered call: {:.1} us \
         (({CALLS}-call grade - no-op grade) / {CALLS})",
        (c.as_secs_f64() - g.as_secs_f64()) / CALLS as f64 * 1e6
    );
}

/// Calls the second probe makes to the subject, to price one brokered round trip.
const CALLS: usize = 1000;

/// A root with one probe-only task, a two-commit repository, and the real runners/.
fn setup(root: &Path, dir: &Path) -> (PathBuf, PathBuf, String) {
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("pkg")).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("pkg/__init__.py"), "VALUE = 1\n").unwrap();
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=bench",
        "-c",
        "user.email=b@b",
        "commit",
        "-qm",
        "base",
    ]);
    let base = git(&["rev-parse", "HEAD"]);
    std::fs::write(repo.join("pkg/__init__.py"), "VALUE = 2\n").unwrap();
    git(&[
        "-c",
        "user.name=bench",
        "-c",
        "user.email=b@b",
        "commit",
        "-qam",
        "reference",
    ]);
    let head = git(&["rev-parse", "HEAD"]);

    let bench_root = dir.join("root");
    let task = bench_root.join("tasks/bench/bench-noop");
    let probes = bench_root.join("probes/bench-noop");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::create_dir_all(&probes).unwrap();
    std::os::unix::fs::symlink(root.join("runners"), bench_root.join("runners")).unwrap();
    std::fs::write(task.join("prompt.md"), "Set VALUE to 2.\n").unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            r#"id = "bench-noop"
title = "no-op"
summary = "overhead benchmark"
repository = "infradev/bench"
pr = 1
base_commit = "{base}"
reference_commit = "{head}"
[environment]
base_image = "{BASE_IMAGE}"
python = "3.11"
[tests]
files = []
fail_to_pass = []
default_category = "state"
[resources]
memory_mb = 512
cpus = 1.0
pids = 64
test_timeout_s = 30
[resources.timeouts]
build_s = 300
tests_s = 60
probes_s = 60
"#
        ),
    )
    .unwrap();
    std::fs::write(
        probes.join("probes.toml"),
        "task = \"bench-noop\"\n[[probe]]\nid = \"noop\"\ntest = \"test_noop.py::test_noop\"\ncategory = \"state\"\nrequirement = \"nothing\"\nwhy_official_tests_miss = \"benchmark\"\n",
    )
    .unwrap();
    std::fs::write(probes.join("test_noop.py"), "def test_noop():\n    pass\n").unwrap();
    // The same task's probe making CALLS round trips to the subject (`pkg` is the repository's).
    let calls = bench_root.join("probes/bench-calls");
    std::fs::create_dir_all(&calls).unwrap();
    std::fs::write(
        calls.join("probes.toml"),
        "task = \"bench-noop\"\n[[probe]]\nid = \"calls\"\ntest = \"test_calls.py::test_calls\"\ncategory = \"state\"\nrequirement = \"nothing\"\nwhy_official_tests_miss = \"benchmark\"\n",
    )
    .unwrap();
    std::fs::write(
        calls.join("test_calls.py"),
        format!(
            "from infradev_probe import subject\n\nmath = subject.module(\"math\")\n\n\ndef test_calls():\n    for i in range({CALLS}):\n        assert math.sqrt(4.0) == 2.0\n"
        ),
    )
    .unwrap();
    (bench_root, repo, head)
}

/// The image the grade's containers run: the task's environment image when it installs
/// packages, else (like bench-noop) the base image itself.
fn env_image() -> String {
    let out = Command::new("docker")
        .args([
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "infradev-env/bench-noop",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map_or_else(|| BASE_IMAGE.to_owned(), str::to_owned)
}

fn time(f: impl Fn()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p90(v: &[Duration]) -> Duration {
    v[(v.len() * 9 / 10).min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
