//! `infradev tasks validate|lint` through the real binary, on copies of the example task:
//! validation from a git clone and from release sdists (served from the cache, pinned by
//! SHA-256), a task that does not hold up, and lint naming what a prompt leaves out.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use support::{
    FLAKY_PROBE, TASK, add_flaky_probe, copy_dir, docker_ready, example_repo, git, root,
};

/// A root holding a copy of the example task and its probes, with runners/ linked in.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &root().join("tasks/example").join(TASK),
            &dir.path().join("tasks/example").join(TASK),
        );
        copy_dir(
            &root().join("probes").join(TASK),
            &dir.path().join("probes").join(TASK),
        );
        std::os::unix::fs::symlink(root().join("runners"), dir.path().join("runners")).unwrap();
        let _ = std::fs::remove_file(task_dir(dir.path()).join("validation.json"));
        Scratch { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn task_toml(&self) -> PathBuf {
        task_dir(self.path()).join("task.toml")
    }

    fn edit(&self, file: &Path, from: &str, to: &str) {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.contains(from), "`{from}` not in {}", file.display());
        std::fs::write(file, text.replacen(from, to, 1)).unwrap();
    }

    fn run(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
            .arg("--root")
            .arg(self.path())
            .args(args)
            .env("INFRADEV_CACHE", self.path().join("cache"))
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    fn validation(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(task_dir(self.path()).join("validation.json"))
            .expect("validation.json is written");
        serde_json::from_str(&text).unwrap()
    }
}

impl Scratch {
    /// `tasks validate` of the example task, from the example repository, with `extra`
    /// arguments.
    fn validate_example(&self, reference_runs: u32, extra: &[&str]) -> (i32, String) {
        let repo = example_repo().display().to_string();
        let runs = reference_runs.to_string();
        let mut args = vec![
            "tasks",
            "validate",
            TASK,
            "--git",
            &repo,
            "--reference-runs",
            &runs,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }
}

/// The names of a validation record's runs, in order.
fn run_names(v: &serde_json::Value) -> Vec<&str> {
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

fn task_dir(root: &Path) -> PathBuf {
    root.join("tasks/example").join(TASK)
}

fn checks(v: &serde_json::Value) -> Vec<(String, bool)> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["ok"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_example_validates_from_git_and_the_record_says_how() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    let (code, out) = s.validate_example(2, &[]);
    assert_eq!(code, 0, "{out}");
    let v = s.validation();
    assert_eq!(v["ok"], true);
    assert_eq!(v["source"]["kind"], "git");
    let names = run_names(&v);
    assert_eq!(names, ["base", "reference-1", "reference-2", "null-patch"]);
    assert!(checks(&v).iter().all(|(_, ok)| *ok), "{v:#}");
    assert!(
        v["images"][0]["id"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "the image id is recorded"
    );
    let base = &v["runs"][0];
    assert_eq!(base["verdict"], "unresolved");
    assert_eq!(
        base["outcomes"]["tests/test_block_allocator.py::test_shared_prefix_reuses_blocks"],
        "failed"
    );
    assert_eq!(v["runs"][3]["verdict"], "unresolved", "the null patch");
    assert_ne!(
        v["runs"][3]["head"], base["head"],
        "the null patch is its own commit"
    );
}

#[test]
fn a_task_whose_expectations_are_wrong_is_not_valid_and_says_which_test() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    // A test that passes on the base, declared FAIL_TO_PASS; and a new probe declared as
    // checking behaviour the base already has.
    s.edit(
        &s.task_toml(),
        "fail_to_pass = [",
        "fail_to_pass = [\n    \"tests/test_block_allocator.py::test_can_allocate\",",
    );
    let probes = s.path().join("probes").join(TASK).join("probes.toml");
    s.edit(
        &probes,
        "id = \"evicted_blocks_are_forgotten\"",
        "id = \"evicted_blocks_are_forgotten\"\nchecks_base_behaviour = true",
    );
    let (code, out) = s.validate_example(1, &[]);
    assert_eq!(code, 2, "a task problem, not an infrastructure one: {out}");
    assert!(
        out.contains(
            "FAIL_TO_PASS `tests/test_block_allocator.py::test_can_allocate` passes on the base"
        ),
        "{out}"
    );
    assert!(
        out.contains("probe `test_state.py::test_evicted_blocks_are_forgotten` is marked checks_base_behaviour"),
        "{out}"
    );
    let v = s.validation();
    assert_eq!(v["ok"], false);
    let c = checks(&v);
    assert!(!c[0].1, "the base check fails: {c:?}");
    assert!(
        c[1].1 && c[3].1,
        "the reference and null-patch checks still pass: {c:?}"
    );
}

/// `[[reject]]`: validation grades each wrong patch (the reference with one mutation at one
/// line) and requires every probe it names to fail; a probe that does not catch its patch,
/// and a mutation that is not there, fail the check and name the patch.
#[test]
fn wrong_patches_of_reject_must_fail_the_probes_they_name() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    let rejects = r#"
[[reject]]
path = "minicache/block_allocator.py"
line = 143
operator = "copy_removed"
probes = ["returned_tables_are_the_callers_own"]
why = "the caller gets the allocator's own block table"

[[reject]]
path = "minicache/block_allocator.py"
line = 117
operator = "loop_control"
probes = ["prefix_hits_stop_at_the_first_uncached_block", "history_is_bounded"]
why = "prefix hits go on past the first uncached block (history_is_bounded cannot see it)"

[[reject]]
path = "minicache/block_allocator.py"
line = 117
operator = "collective_duplicated"
probes = ["public_interface"]
why = "there is no collective at this line"
"#;
    let mut toml = std::fs::read_to_string(s.task_toml()).unwrap();
    toml.push_str(rejects);
    std::fs::write(s.task_toml(), toml).unwrap();
    let (code, out) = s.validate_example(1, &[]);
    assert_eq!(code, 2, "a task problem: {out}");
    let v = s.validation();
    let names = run_names(&v);
    assert_eq!(
        names,
        [
            "base",
            "reference-1",
            "null-patch",
            "reject copy_removed at minicache/block_allocator.py:143",
            "reject loop_control at minicache/block_allocator.py:117",
        ],
        "the patch that cannot be made is not graded"
    );
    for run in &v["runs"].as_array().unwrap()[3..] {
        assert_eq!(run["verdict"], "unresolved", "{run}");
        assert_ne!(run["head"], v["runs"][1]["head"], "its own commit");
    }
    let reject = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "rejects: each wrong patch fails the probes it names")
        .expect("the reject check is recorded");
    assert_eq!(reject["ok"], false);
    let problems: Vec<&str> = reject["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        problems,
        [
            "reject collective_duplicated at minicache/block_allocator.py:117: no \
             `collective_duplicated` mutation at line 117 (the mutations there: loop_control)",
            "reject loop_control at minicache/block_allocator.py:117: probe \
             `test_memory.py::test_history_is_bounded` is passed",
        ],
        "{reject:#}"
    );
    // The other checks hold: the task is sound, only two of its rejects are not.
    let c = checks(&v);
    assert!(c[..4].iter().all(|(_, ok)| *ok), "{c:?}");
}

/// A reference that passes a probe only on the host's rerun: `tasks validate` records the
/// flake and quarantines the task with the reason; `tasks check` then fails naming it.
#[test]
fn a_reference_that_flakes_in_validation_quarantines_the_task() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    add_flaky_probe(&s.path().join("probes").join(TASK), None);
    let (code, out) = s.validate_example(1, &["--retries", "1"]);
    assert_eq!(code, 2, "a task problem: {out}");
    let v = s.validation();
    assert_eq!(v["ok"], false);
    let why = v["quarantined"].as_str().expect("quarantined");
    assert!(
        why.contains(&format!(
            "`{FLAKY_PROBE}` passed only on a rerun in reference-1"
        )),
        "{why}"
    );
    assert!(out.contains("quarantined"), "{out}");
    let reference = &v["runs"][1];
    assert_eq!(reference["outcomes"][FLAKY_PROBE], "flaky", "{v:#}");
    let flakes = v["flakes"].as_array().unwrap();
    assert!(
        flakes.iter().any(|f| f["run"] == "reference-1"
            && f["id"] == FLAKY_PROBE
            && f["attempts"] == serde_json::json!(["failed", "passed"])),
        "{v:#}"
    );
    let (code, out) = s.run(&["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("{TASK}: quarantined: {why}")),
        "{out}"
    );
}

/// Packs `rev` of the example repository as `minicache-<version>.tar.gz` with a top folder,
/// the way an sdist is laid out; returns the file's SHA-256.
fn sdist(repo: &Path, rev: &str, version: &str, into: &Path) -> String {
    std::fs::create_dir_all(into).unwrap();
    let file = into.join(format!("minicache-{version}.tar.gz"));
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "archive",
            "--format=tar.gz",
            &format!("--prefix=minicache-{version}/"),
            "-o",
        ])
        .arg(&file)
        .arg(rev)
        .output()
        .unwrap();
    assert!(out.status.success());
    hex::encode(Sha256::digest(std::fs::read(&file).unwrap()))
}

#[test]
fn a_task_validates_from_release_sdists_pinned_by_hash() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    let repo = example_repo();
    let text = std::fs::read_to_string(s.task_toml()).unwrap();
    let field = |key: &str| -> String {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        line.split('"').nth(1).unwrap().to_owned()
    };
    let sdists = s.path().join("cache/sdists");
    let base_sha = sdist(repo, &field("base_commit"), "0.1.0", &sdists);
    let reference_sha = sdist(repo, &field("reference_commit"), "0.2.0", &sdists);
    s.edit(
        &s.task_toml(),
        "validate_from = \"git\"",
        &format!(
            "validate_from = \"release\"\nbase_release = \"minicache==0.1.0\"\n\
             reference_release = \"minicache==0.2.0\"\nbase_sha256 = \"{base_sha}\"\n\
             reference_sha256 = \"{reference_sha}\""
        ),
    );
    let (code, out) = s.run(&["tasks", "validate", TASK, "--reference-runs", "1"]);
    assert_eq!(code, 0, "{out}");
    let v = s.validation();
    assert_eq!(v["source"]["kind"], "release");
    assert_eq!(v["source"]["base"], "minicache==0.1.0");
    assert!(checks(&v).iter().all(|(_, ok)| *ok), "{v:#}");

    // A cached sdist that is not the pinned one is refused before anything runs.
    std::fs::write(sdists.join("minicache-0.1.0.tar.gz"), b"tampered").unwrap();
    let (code, out) = s.run(&["tasks", "validate", TASK, "--reference-runs", "1"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("minicache-0.1.0.tar.gz: SHA-256 is"), "{out}");
    assert!(out.contains(&base_sha), "{out}");
}

#[test]
fn lint_names_each_upstream_symbol_the_prompt_leaves_out() {
    let s = Scratch::new();
    let (code, out) = s.run(&["tasks", "lint", "--all"]);
    assert_eq!(code, 0, "the shipped prompt names everything: {out}");

    let prompt = task_dir(s.path()).join("prompt.md");
    let text = std::fs::read_to_string(&prompt).unwrap();
    std::fs::write(
        &prompt,
        text.replace("num_cached_tokens", "cached token count"),
    )
    .unwrap();
    let probe = s.path().join("probes").join(TASK).join("test_state.py");
    let mut source = std::fs::read_to_string(&probe).unwrap();
    source.push_str(
        "\n\ndef test_extra():\n    from minicache.block_allocator import BlockAllocator\n    \
         BlockAllocator(4).defragment(aggressive=True)\n",
    );
    std::fs::write(&probe, source).unwrap();
    // A helper module the probes share is read too: the judge receives it like the tests.
    std::fs::write(
        s.path().join("probes").join(TASK).join("_helper.py"),
        "from minicache.block_allocator import BlockAllocator\n\n\n\
         def compacted():\n    return BlockAllocator(4).compact(level=2)\n",
    )
    .unwrap();

    let (code, out) = s.run(&["tasks", "lint", TASK]);
    assert_eq!(code, 2, "{out}");
    for (file, kind, symbol) in [
        // Reported at its first use, in whichever probe file that is.
        ("", "attribute", "num_cached_tokens"),
        ("test_state.py:", "attribute", "defragment"),
        ("test_state.py:", "keyword", "aggressive"),
        ("_helper.py:", "attribute", "compact"),
        ("_helper.py:", "keyword", "level"),
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("probes/{TASK}/{file}"))
                    && l.contains(&format!(
                        "{kind} `{symbol}` is used by a probe but not named"
                    ))),
            "{kind} {symbol}: {out}"
        );
    }
    assert!(
        !out.contains("`BlockAllocator`"),
        "named symbols are not reported: {out}"
    );
}

#[test]
fn lint_fails_probes_that_reach_no_upstream_symbol_it_can_see() {
    let s = Scratch::new();
    let dir = s.path().join("probes").join(TASK);
    // The same probes, with every module path built at run time: the extractor cannot follow
    // them, so no symbol they use is checked against the prompt.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            let text = std::fs::read_to_string(&path).unwrap();
            let hidden = text
                .replace(
                    "subject.module(\"minicache.block_allocator\")",
                    "subject.module(\".\".join([\"minicache\", \"block_allocator\"]))",
                )
                .replace(
                    "subject.module(\"minicache\")",
                    "subject.module(\"\".join([\"mini\", \"cache\"]))",
                );
            std::fs::write(&path, hidden).unwrap();
        }
    }
    let (code, out) = s.run(&["tasks", "lint", TASK]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("no probe uses an upstream symbol that lint can see"),
        "{out}"
    );
    assert!(out.contains("0 upstream symbol(s) checked"), "{out}");
}

#[test]
fn the_shipped_tasks_pass_lint() {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root())
        .args(["tasks", "lint", "--all"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
}

#[test]
fn release_fields_are_checked_with_their_line() {
    let s = Scratch::new();
    s.edit(
        &s.task_toml(),
        "validate_from = \"git\"",
        "validate_from = \"release\"\nbase_release = \"minicache-0.1\"",
    );
    let (code, out) = s.run(&["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("field `upstream.base_release`"), "{out}");
    assert!(out.contains("is not `name==version`"), "{out}");

    let s = Scratch::new();
    s.edit(
        &s.task_toml(),
        "note = \"Self-contained",
        "env = { PYTHONPATH = \"/evil\" }\nnote = \"Self-contained",
    );
    let (code, out) = s.run(&["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("field `environment.env`") && out.contains("`PYTHONPATH` cannot be set"),
        "{out}"
    );
}

/// When the upstream change itself edits test infrastructure (a conftest.py), a submission
/// making the same edit is not flagged, and one making another edit gets the reference's
/// version back, not the base's.
#[test]
fn test_infrastructure_is_the_references() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    let repo = s.path().join("upstream");
    let src = example_repo().display().to_string();
    let out = Command::new("git")
        .args(["clone", "--quiet", &src])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(s.task_toml()).unwrap();
    let field = |key: &str| -> String {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        line.split('"').nth(1).unwrap().to_owned()
    };
    let (base, reference) = (field("base_commit"), field("reference_commit"));
    // The upstream change now also adds a conftest.py that a test relies on.
    let conftest = "import pytest\n\n\n@pytest.fixture\ndef upstream_fixture():\n    return 42\n";
    git(&repo, &["checkout", "--quiet", "--detach", &reference]);
    std::fs::write(repo.join("tests/conftest.py"), conftest).unwrap();
    let tests = repo.join("tests/test_block_allocator.py");
    let mut official = std::fs::read_to_string(&tests).unwrap();
    official.push_str(
        "\n\ndef test_upstream_fixture(upstream_fixture):\n    assert upstream_fixture == 42\n",
    );
    std::fs::write(&tests, official).unwrap();
    git(
        &repo,
        &["add", "tests/conftest.py", "tests/test_block_allocator.py"],
    );
    git(
        &repo,
        &["commit", "--quiet", "-m", "reference with a conftest"],
    );
    let reference2 = git(&repo, &["rev-parse", "HEAD"]);
    s.edit(&s.task_toml(), &reference, &reference2);
    s.edit(
        &s.task_toml(),
        "fail_to_pass = [",
        "fail_to_pass = [\n    \"tests/test_block_allocator.py::test_upstream_fixture\",",
    );
    // A submission identical to it, and one that rewrites the conftest.
    git(&repo, &["checkout", "--quiet", "--detach", &base]);
    let diff = git(&repo, &["diff", &base, &reference2]);
    std::fs::write(s.path().join("change.diff"), diff + "\n").unwrap();
    git(
        &repo,
        &["apply", &s.path().join("change.diff").display().to_string()],
    );
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "--quiet", "-m", "the same change"]);
    let same = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(
        repo.join("tests/conftest.py"),
        "import pytest\n\n\n@pytest.fixture\ndef upstream_fixture():\n    return 0\n",
    )
    .unwrap();
    git(&repo, &["commit", "--quiet", "-am", "another conftest"]);
    let tampered = git(&repo, &["rev-parse", "HEAD"]);

    let grade = |head: &str| -> serde_json::Value {
        let json = s.path().join(format!("{head}.json"));
        let (_, out) = s.run(&[
            "grade",
            "--task",
            TASK,
            "--repo",
            &repo.display().to_string(),
            "--head",
            head,
            "--json",
            &json.display().to_string(),
        ]);
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|_| panic!("{out}")))
            .unwrap()
    };
    let report = grade(&same);
    assert_eq!(
        report["flags"],
        serde_json::json!([]),
        "the upstream edit itself: {report:#}"
    );
    assert_eq!(report["grade"]["verdict"], "resolved");
    let report = grade(&tampered);
    assert_eq!(
        report["flags"][0]["path"], "tests/conftest.py",
        "another edit is flagged: {report:#}"
    );
    // The official test that needs the reference's fixture passes: its conftest is back.
    assert_eq!(report["grade"]["verdict"], "resolved", "{report:#}");
}

/// A wheel of a tiny pure-Python package `name==version`, written into `dir` (what pip finds
/// with `--find-links`).
fn write_wheel(dir: &Path, name: &str, version: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let file = format!("{name}-{version}-py3-none-any.whl");
    let script = format!(
        "import zipfile\n\
         with zipfile.ZipFile({path:?}, 'w') as z:\n\
         \x20   z.writestr('{name}/__init__.py', 'VALUE = 1\\n')\n\
         \x20   z.writestr('{name}-{version}.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n')\n\
         \x20   z.writestr('{name}-{version}.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: infradev-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
         \x20   z.writestr('{name}-{version}.dist-info/RECORD', '')\n",
        path = dir.join(&file).display().to_string(),
    );
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(ok.success());
    file
}

/// Building a task's environment layer shows pip's progress: off a terminal, one plain line
/// per wheel processed and one when the install is done.
#[test]
fn an_environment_build_streams_pip_progress() {
    if !docker_ready() {
        return;
    }
    let s = Scratch::new();
    // A version of our own per run, so the layer is really built (layers are cached by content).
    let version = format!("1.0.{}", std::process::id());
    let wheels = s.path().join("wheels");
    let wheel = write_wheel(&wheels, "infradev_demo_pkg", &version);
    s.edit(
        &s.task_toml(),
        "packages = []",
        &format!("packages = [\"infradev_demo_pkg=={version}\"]"),
    );
    let reference = {
        let text = std::fs::read_to_string(s.task_toml()).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("reference_commit"))
            .unwrap()
            .to_owned();
        line.split('"').nth(1).unwrap().to_owned()
    };
    let repo = example_repo().display().to_string();
    let wheels_arg = wheels.display().to_string();
    let (code, out) = s.run(&[
        "grade",
        "--task",
        TASK,
        "--repo",
        &repo,
        "--head",
        &reference,
        "--wheels",
        &wheels_arg,
    ]);
    let removed = Command::new("sh")
        .args([
            "-c",
            &format!("docker images -q infradev-env/{TASK} | xargs -r docker rmi -f"),
        ])
        .status();
    assert!(removed.is_ok_and(|s| s.success()));
    assert!(code == 0 || code == 1, "the grade ran: {out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("build infradev-env/")
                && l.ends_with(&format!("processing {wheel}"))),
        "{out}"
    );
    assert!(out.contains(": installing 1 package(s)"), "{out}");
    assert!(out.contains(": installed"), "{out}");
    assert!(
        !out.contains('\u{1b}'),
        "no terminal codes off a terminal: {out}"
    );
}
