//! `infradev tasks new` through the real binary: the example repository's change scaffolded
//! into a task whose official test lists, proposed from real runs on the base and the
//! reference in Docker, are the hand-written example task's; a pull request found by its
//! number in a clone's history; and the errors a maintainer can make.

mod support;

use std::collections::BTreeSet;

use infradev::task::Registry;
use support::{TASK, docker_ready, example_repo, git, infradev_run, root};

fn tasks_new(args: &[&str]) -> (i32, String) {
    let mut all = vec!["tasks", "new"];
    all.extend_from_slice(args);
    infradev_run(&root(), &all)
}

fn set(ids: &[String]) -> BTreeSet<&str> {
    ids.iter().map(String::as_str).collect()
}

#[test]
fn the_example_change_scaffolds_into_the_example_task() {
    if !docker_ready() {
        return;
    }
    let registry = Registry::load(&root()).unwrap();
    let example = registry
        .tasks
        .iter()
        .flatten()
        .find(|t| t.id == TASK)
        .expect("the example task");
    let into = tempfile::tempdir().unwrap();
    let repo = example_repo().display().to_string();
    let into_arg = into.path().display().to_string();
    let example_args = [
        "--repo",
        "infradev/minicache",
        "--pr",
        "1",
        "--area",
        "inference",
        "--base",
        &example.base_commit,
        "--reference",
        &example.reference_commit,
        "--git",
        &repo,
        "--id",
        "minicache-again",
        "--into",
        &into_arg,
    ];
    let (code, out) = tasks_new(&example_args);
    assert_eq!(code, 0, "{out}");
    for want in [
        "test files: tests/test_block_allocator.py",
        "packages: minicache",
        "proposed: 8 FAIL_TO_PASS, 8 PASS_TO_PASS, 0 left out",
        "left to write:",
        "infradev tasks validate minicache-again --git",
    ] {
        assert!(out.contains(want), "no `{want}` in:\n{out}");
    }

    let dir = into.path().join("tasks/minicache/minicache-again");
    let probes = into.path().join("probes/minicache-again");
    let task = Registry::resolve(&root(), &dir.display().to_string(), Some(probes.as_path()))
        .expect("the scaffolded task loads");
    assert_eq!(task.base_commit, example.base_commit);
    assert_eq!(task.reference_commit, example.reference_commit);
    assert_eq!(task.tests.files, example.tests.files);
    assert_eq!(
        set(&task.tests.fail_to_pass),
        set(&example.tests.fail_to_pass)
    );
    assert_eq!(
        set(&task.tests.pass_to_pass),
        set(&example.tests.pass_to_pass)
    );
    assert_eq!(task.probes.probes.len(), 1, "one probe skeleton to write");

    let prompt = std::fs::read_to_string(dir.join("prompt.md")).unwrap();
    assert!(prompt.contains("## Interface") && prompt.contains("`minicache/block_allocator.py`"));
    let skeleton = std::fs::read_to_string(probes.join("test_interface.py")).unwrap();
    assert!(
        skeleton.contains("subject.module(\"minicache\")"),
        "{skeleton}"
    );

    // The same id again is refused: nothing is overwritten.
    let (code, out) = tasks_new(&[&example_args[..], &["--no-run"]].concat());
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("already exists"), "{out}");
}

#[test]
fn a_pull_request_is_found_by_its_number() {
    let scratch = tempfile::tempdir().unwrap();
    let repo = scratch.path().join("widgets");
    std::fs::create_dir_all(repo.join("widgets")).unwrap();
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    git(scratch.path(), &["init", "-q", "widgets"]);
    std::fs::write(repo.join("widgets/__init__.py"), "X = 1\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "widgets: start"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("widgets/__init__.py"), "X = 2\n").unwrap();
    std::fs::write(repo.join("tests/test_x.py"), "def test_x():\n    pass\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "Make X two (#42)"]);
    let reference = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("widgets/__init__.py"), "X = 3\n").unwrap();
    git(&repo, &["commit", "-qam", "Later work (#43)"]);

    let into = scratch.path().join("out");
    let into_arg = into.display().to_string();
    let repo_arg = repo.display().to_string();
    let (code, out) = tasks_new(&[
        "--repo",
        "acme/widgets",
        "--pr",
        "42",
        "--area",
        "inference",
        "--git",
        &repo_arg,
        "--into",
        &into_arg,
        "--no-run",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("tests not run (--no-run)"), "{out}");
    let dir = into.join("tasks/widgets/widgets-pr42");
    let task = Registry::resolve(
        &root(),
        &dir.display().to_string(),
        Some(into.join("probes/widgets-pr42").as_path()),
    )
    .expect("the scaffolded task loads");
    assert_eq!(task.title, "Make X two");
    assert_eq!(
        (task.base_commit.as_str(), task.reference_commit.as_str()),
        (base.as_str(), reference.as_str())
    );
    assert_eq!(task.tests.files, ["tests/test_x.py"]);
    assert!(task.tests.fail_to_pass.is_empty() && task.tests.pass_to_pass.is_empty());

    // A number no commit merges: the error says so and how to go on.
    let (code, out) = tasks_new(&[
        "--repo",
        "acme/widgets",
        "--pr",
        "4",
        "--area",
        "inference",
        "--git",
        &repo_arg,
        "--into",
        &into_arg,
        "--no-run",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("merges #4") && out.contains("--reference"),
        "{out}"
    );
    // A clone that is not there, and a revision that does not exist.
    let (code, out) = tasks_new(&[
        "--repo",
        "acme/widgets",
        "--pr",
        "42",
        "--area",
        "inference",
        "--git",
        "/nonexistent/clone",
        "--no-run",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("no clone of acme/widgets at /nonexistent/clone"),
        "{out}"
    );
    let (code, out) = tasks_new(&[
        "--repo",
        "acme/widgets",
        "--pr",
        "42",
        "--area",
        "inference",
        "--git",
        &repo_arg,
        "--reference",
        "nope",
        "--into",
        &into_arg,
        "--no-run",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--reference `nope` is not a commit"), "{out}");
}
