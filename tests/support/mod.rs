//! Shared harness for the integration tests: the real binary, a real example repository, real
//! Docker. Nothing of ours is mocked.
#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use infradev::grade::report::Report;

/// `stories!(a, b)`: each story `async fn a(backend: Backend)` as two tests, `sqlite::a` and
/// `postgres::a` (the store is tested for real on both). Unused by the binaries without stories.
#[allow(unused_macros)]
macro_rules! stories {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Sqlite).await } )* }
        mod postgres { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Postgres).await } )* }
    };
}

pub mod fake_github;
pub mod payloads;
pub mod redteam;
pub mod scale_out;
pub mod story;

pub const TASK: &str = "example-block-allocator";
/// The tag runners/base-image/build.sh always (re)points at the newest base image.
pub const BASE_IMAGE: &str = "infradev-base:bookworm";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Copies a directory tree (a task or its probes, into a scratch root).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Runs git in `dir` with a fixed identity and no user configuration; panics with git's
/// message when it fails, returns its trimmed standard output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The real binary, `infradev --root <root> <args>`.
pub fn infradev(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_infradev"));
    c.arg("--root").arg(root).args(args);
    c
}

/// A finished process, for assertion messages: its exit code, stdout and stderr.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `infradev --root <root> <args>`: its exit code and its stdout and stderr together.
pub fn infradev_run(root: &Path, args: &[&str]) -> (i32, String) {
    let out = infradev(root, args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The probe [`add_flaky_probe`] adds.
pub const FLAKY_PROBE: &str = "test_flaky.py::test_fails_while_the_interface_probe_runs_beside_it";

/// Adds a probe to a copy of the example task's probes (`probes`, holding its probes.toml)
/// that fails on its first attempt only: it fails while `test_interface.py` was collected
/// beside it. The first attempt of the probe phase runs every probe file, the host's rerun
/// only the ids that failed, so on the reference (whose interface probe passes) it passes
/// there. Only the host's own rerun decides that: no hook in any sandbox. With `retries`, the
/// manifest sets its own.
pub fn add_flaky_probe(probes: &Path, retries: Option<u32>) {
    let file = probes.join("probes.toml");
    let mut manifest = std::fs::read_to_string(&file).unwrap();
    if let Some(n) = retries {
        let (first, rest) = manifest.split_once('\n').unwrap();
        manifest = format!("{first}\nretries = {n}\n{rest}");
    }
    manifest.push_str(&format!(
        "\n[[probe]]\nid = \"first_attempt_fails\"\ntest = \"{FLAKY_PROBE}\"\ncategory = \"state\"\n\
         requirement = \"fails on the first attempt only (a test of flake handling)\"\n\
         why_official_tests_miss = \"it checks the grader, not the submission\"\n"
    ));
    std::fs::write(&file, manifest).unwrap();
    std::fs::write(
        probes.join("test_flaky.py"),
        "def test_fails_while_the_interface_probe_runs_beside_it(request):\n    \
         collected = [item.nodeid for item in request.session.items]\n    \
         assert not any('test_interface.py' in n for n in collected)\n",
    )
    .unwrap();
}

pub fn probes_dir() -> PathBuf {
    root().join("probes").join(TASK)
}

/// The example repository, built once per test binary with its deterministic history.
pub fn example_repo() -> &'static Path {
    static REPO: OnceLock<tempfile::TempDir> = OnceLock::new();
    REPO.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        infradev::cli::demo::make_example_repo(&root(), &dir.path().join("minicache"))
            .expect("make-repo.sh");
        dir
    })
    .path()
    .join("minicache")
    .leak()
}

/// Whether Docker and the base image are there. Under CI=true their absence fails the test
/// (never a skip); elsewhere the test says loudly why it did not run.
pub fn docker_ready() -> bool {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| {
        let ok = |args: &[&str]| {
            Command::new("docker")
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !ok(&["info"]) {
            return Err(
                "the Docker Engine does not answer (runners/ensure-docker.sh starts it)".into(),
            );
        }
        if !ok(&["image", "inspect", BASE_IMAGE]) {
            return Err(format!(
                "the base image {BASE_IMAGE} is missing (runners/base-image/build.sh builds it)"
            ));
        }
        Ok(())
    });
    match ready {
        Ok(()) => true,
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI=true and {why}"),
        Err(why) => {
            eprintln!("NOT RUN (Docker needed): {why}");
            false
        }
    }
}

/// Whether the local executor's interpreter has pytest; required under CI=true.
pub fn local_python_ready() -> bool {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    match ok {
        true => true,
        false if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true and /usr/bin/python3 has no pytest (apt-get install python3-pytest)")
        }
        false => {
            eprintln!("NOT RUN (local executor needs /usr/bin/python3 with pytest)");
            false
        }
    }
}

/// What one run of `infradev grade` produced.
pub struct Graded {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub json: String,
    pub junit: String,
    pub report: Option<Report>,
}

impl Graded {
    pub fn report(&self) -> &Report {
        self.report.as_ref().unwrap_or_else(|| {
            panic!(
                "no report (exit {}):\n{}\n{}",
                self.code, self.stdout, self.stderr
            )
        })
    }

    /// Every byte we emitted, for leak checks.
    pub fn all_output(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}",
            self.stdout, self.stderr, self.json, self.junit
        )
    }

    /// The categories of the failing tests whose id contains `needle`.
    pub fn categories_of(&self, needle: &str) -> Vec<String> {
        self.report()
            .grade
            .tests
            .iter()
            .filter(|t| t.evidence.id.contains(needle))
            .filter_map(|t| t.category.map(|c| c.to_string()))
            .collect()
    }
}

/// Runs the real binary: `infradev grade --task <task> --repo <repo> --head <head>`.
pub fn grade(task: &Path, repo: &Path, head: &str, executor: &str, extra: &[&str]) -> Graded {
    let out_dir = tempfile::tempdir().expect("temp dir");
    let (json, junit) = (
        out_dir.path().join("report.json"),
        out_dir.path().join("report.xml"),
    );
    let output = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root())
        .args(["grade", "--task"])
        .arg(task)
        .arg("--repo")
        .arg(repo)
        .args(["--head", head, "--executor", executor, "--probes"])
        .arg(probes_dir())
        .arg("--json")
        .arg(&json)
        .arg("--junit")
        .arg(&junit)
        .args(extra)
        .output()
        .expect("run infradev");
    let json_text = std::fs::read_to_string(&json).unwrap_or_default();
    Graded {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        report: serde_json::from_str(&json_text).ok(),
        json: json_text,
        junit: std::fs::read_to_string(&junit).unwrap_or_default(),
    }
}

/// The example task's directory in the checkout.
pub fn task_dir() -> PathBuf {
    root().join("tasks/example").join(TASK)
}

/// A copy of the example task with some `key = value` lines of task.toml replaced (tighter
/// timeouts for hostile submissions, a missing base image, …). Probes stay the real ones.
pub fn task_variant(overrides: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let task = dir.path().join(TASK);
    std::fs::create_dir_all(&task).expect("mkdir");
    std::fs::copy(task_dir().join("prompt.md"), task.join("prompt.md")).expect("copy prompt");
    let text = std::fs::read_to_string(task_dir().join("task.toml")).expect("read task.toml");
    let mut replaced = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let key = line.split('=').next().unwrap_or_default().trim();
            match overrides.iter().find(|(k, _)| *k == key) {
                Some((k, v)) => {
                    replaced += 1;
                    format!("{k} = {v}")
                }
                None => line.to_owned(),
            }
        })
        .collect();
    assert_eq!(
        replaced,
        overrides.len(),
        "every override must match a line of task.toml"
    );
    std::fs::write(task.join("task.toml"), lines.join("\n") + "\n").expect("write task.toml");
    dir
}
