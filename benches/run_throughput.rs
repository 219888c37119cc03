//! Benchmark-run throughput: the example task's submissions graded by `infradev run --jobs J`
//! against the same submissions graded one after another with `infradev grade`, in the same
//! run, on a warm environment image. Prints grades per minute for both and the speed-up.
//!
//! `cargo bench --bench run_throughput` (needs Docker and runners/base-image/build.sh).
//! `RUN_BENCH_JOBS` (default 3) and `RUN_BENCH_COPIES` (default 2: each of reference, wrong
//! and broken this many times) change the shape.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

const TASK: &str = "example-block-allocator";
const HEADS: [&str; 3] = [
    "submission/reference",
    "submission/wrong",
    "submission/broken",
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --all-targets` builds and runs bench targets too; measure only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("run_throughput: not measuring outside `cargo bench`");
        return;
    }
    let jobs = env_usize("RUN_BENCH_JOBS", 3);
    let copies = env_usize("RUN_BENCH_COPIES", 2);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir().expect("temp dir");
    let repo = scratch.path().join("minicache");
    infradev::cli::demo::make_example_repo(&root, &repo).expect("make-repo.sh");
    let heads: Vec<&str> = (0..copies).flat_map(|_| HEADS).collect();

    let grade = |head: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
            .arg("--root")
            .arg(&root)
            .args([
                "grade",
                "--task",
                TASK,
                "--executor",
                "docker",
                "--head",
                head,
                "--repo",
            ])
            .arg(&repo)
            .output()
            .expect("run infradev grade");
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{head}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    grade(HEADS[0]); // Builds (or finds) the environment image: both sides start warm.

    let t0 = Instant::now();
    for head in &heads {
        grade(head);
    }
    let sequential = t0.elapsed().as_secs_f64();

    let subs = scratch.path().join("subs.jsonl");
    let lines: Vec<String> = heads
        .iter()
        .enumerate()
        .map(|(i, head)| {
            serde_json::json!({
                "id": format!("s{i}"), "task": TASK, "repo": repo, "rev": head, "agent": "bench"
            })
            .to_string()
        })
        .collect();
    std::fs::write(&subs, lines.join("\n")).expect("write submissions");
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(&root)
        .args([
            "run",
            "--run-id",
            "bench",
            "--jobs",
            &jobs.to_string(),
            "--submissions",
        ])
        .arg(&subs)
        .arg("--out")
        .arg(scratch.path().join("runs"))
        .output()
        .expect("run infradev run");
    let parallel = t0.elapsed().as_secs_f64();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    report(&heads, jobs, sequential, parallel);
}

fn report(heads: &[&str], jobs: usize, sequential: f64, parallel: f64) {
    let n = heads.len() as f64;
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "run_throughput: {} grades of {TASK}, {cpus} CPU(s)",
        heads.len()
    );
    println!(
        "  one after another (infradev grade ×{}): {sequential:7.1} s  {:5.2} grades/min",
        heads.len(),
        n * 60.0 / sequential
    );
    println!(
        "  infradev run --jobs {jobs}:               {parallel:7.1} s  {:5.2} grades/min",
        n * 60.0 / parallel
    );
    println!("  speed-up: {:.2}x", sequential / parallel);
}
