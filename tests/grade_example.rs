//! The example task end to end through the real binary: each submission gets its verdict and
//! categories, on the Docker executor and on the local executor.

mod support;

use std::process::Command;

use infradev::grading::{Category, Expectation, Verdict};
use support::{
    Graded, docker_ready, example_repo, grade, local_python_ready, task_dir, task_variant,
};

fn grade_example(head: &str, executor: &str) -> Graded {
    grade(&task_dir(), example_repo(), head, executor, &[])
}

fn assert_reference_resolved(g: &Graded) {
    let r = g.report();
    assert_eq!(
        r.grade.verdict,
        Verdict::Resolved,
        "{}\n{}",
        g.stdout,
        g.stderr
    );
    assert_eq!(g.code, 0);
    assert!(r.grade.tests.iter().all(|t| t.category.is_none()));
    assert!(r.flags.is_empty());
    assert!(g.stdout.starts_with("RESOLVED"), "{}", g.stdout);
    assert!(g.junit.contains("<testsuites"), "{}", g.junit);
}

fn assert_wrong_rejected_by_probes(g: &Graded) {
    let r = g.report();
    assert_eq!(
        r.grade.verdict,
        Verdict::Unresolved,
        "{}\n{}",
        g.stdout,
        g.stderr
    );
    assert_eq!(g.code, 1);
    assert!(r.grade.official_passed_but_probes_failed, "{}", g.stdout);
    let official_failures = r
        .grade
        .tests
        .iter()
        .filter(|t| t.expectation != Expectation::Probe && t.category.is_some())
        .count();
    assert_eq!(
        official_failures, 0,
        "the wrong submission passes every official test:\n{}",
        g.stdout
    );
    let probe_categories: Vec<Category> = r
        .grade
        .tests
        .iter()
        .filter(|t| t.expectation == Expectation::Probe)
        .filter_map(|t| t.category)
        .collect();
    for wanted in [Category::Memory, Category::Time, Category::State] {
        assert!(
            probe_categories.contains(&wanted),
            "no {wanted} failure among {probe_categories:?}\n{}",
            g.stdout
        );
    }
    assert!(!probe_categories.contains(&Category::Infra));
}

fn assert_broken_structural(g: &Graded) {
    let r = g.report();
    assert_eq!(
        r.grade.verdict,
        Verdict::Unresolved,
        "{}\n{}",
        g.stdout,
        g.stderr
    );
    assert_eq!(g.code, 1);
    let categories: Vec<Category> = r.grade.tests.iter().filter_map(|t| t.category).collect();
    assert!(
        categories.contains(&Category::Structural),
        "{categories:?}\n{}",
        g.stdout
    );
    assert!(!categories.contains(&Category::Infra));
}

macro_rules! on_both_executors {
    ($($name:ident: $head:literal => $check:ident;)*) => {
        mod docker {
            use super::*;
            $(#[test] fn $name() { if docker_ready() { $check(&grade_example($head, "docker")); } })*
        }
        mod local {
            use super::*;
            $(#[test] fn $name() { if local_python_ready() { $check(&grade_example($head, "local")); } })*
        }
    };
}

on_both_executors! {
    reference_is_resolved: "submission/reference" => assert_reference_resolved;
    wrong_passes_official_tests_but_probes_reject_it: "submission/wrong" => assert_wrong_rejected_by_probes;
    broken_is_structural: "submission/broken" => assert_broken_structural;
    // The reference that also meets itself on `localhost` (torch.distributed's rendezvous
    // does): the sandbox resolves the name to its own loopback, so nothing changes.
    localhost_rendezvous_is_resolved: "submission/localhost_rendezvous" => assert_reference_resolved;
}

#[test]
fn the_base_itself_is_unresolved() {
    if !docker_ready() {
        return;
    }
    let g = grade_example("base", "docker");
    let r = g.report();
    assert_eq!(r.grade.verdict, Verdict::Unresolved);
    assert!(
        r.grade
            .tests
            .iter()
            .filter(|t| t.expectation == Expectation::FailToPass)
            .all(|t| t.category.is_some()),
        "every FAIL_TO_PASS test fails on the base:\n{}",
        g.stdout
    );
}

#[test]
fn a_head_not_built_on_the_base_does_not_apply() {
    if !local_python_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        assert!(
            Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(args)
                .status()
                .unwrap()
                .success()
        )
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("x.py"), "x = 1\n").unwrap();
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "unrelated",
    ]);
    let g = grade(&task_dir(), dir.path(), "HEAD", "local", &[]);
    let r = g.report();
    assert_eq!(r.grade.verdict, Verdict::Unresolved);
    assert!(
        r.apply_error.as_deref().unwrap().contains("base commit"),
        "{:?}",
        r.apply_error
    );
    assert!(
        r.phases.is_empty(),
        "nothing runs when the change does not apply"
    );
    assert!(
        r.grade
            .tests
            .iter()
            .all(|t| t.category == Some(Category::Build))
    );
}

#[test]
fn the_users_checkout_is_never_modified() {
    if !local_python_ready() {
        return;
    }
    let repo = example_repo();
    let state = || {
        let out = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["status", "--porcelain", "--branch"])
            .output()
            .unwrap();
        let head = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        (out.stdout, head.stdout)
    };
    let before = state();
    let g = grade_example("submission/wrong", "local");
    assert_eq!(g.report().grade.verdict, Verdict::Unresolved);
    assert_eq!(before, state());
}

#[test]
fn an_unknown_head_is_a_usage_error() {
    let g = grade_example("no-such-branch", "local");
    assert_eq!(g.code, 2, "{}", g.stderr);
    assert!(g.stderr.contains("no-such-branch"), "{}", g.stderr);
    assert!(g.report.is_none());
}

/// The local executor with an interpreter that has no pytest is our fault: every test is
/// `infra`, the verdict `error`, exit 3 (it was every official test "crashed", blamed on the
/// submission).
#[test]
fn a_local_python_without_pytest_is_an_infra_error_not_the_agents() {
    let out = tempfile::tempdir().unwrap();
    // Debian's pytest is in dist-packages, which `-S` leaves out.
    let python = out.path().join("python-without-pytest");
    std::fs::write(&python, "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let json = out.path().join("r.json");
    let output = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(support::root())
        .args([
            "grade",
            "--task",
            support::TASK,
            "--head",
            "submission/reference",
            "--executor",
            "local",
            "--python",
        ])
        .arg(&python)
        .arg("--json")
        .arg(&json)
        .arg("--repo")
        .arg(example_repo())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    let report: infradev::grade::report::Report =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(report.grade.verdict, Verdict::Error);
    assert!(
        report
            .grade
            .tests
            .iter()
            .all(|t| t.category == Some(Category::Infra)),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_docker_engine_is_an_infra_error_not_the_agents() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let output = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("--root")
        .arg(support::root())
        .args([
            "grade",
            "--task",
            support::TASK,
            "--head",
            "submission/wrong",
            "--json",
        ])
        .arg(&json)
        .arg("--repo")
        .arg(example_repo())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: infradev::grade::report::Report =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(report.grade.verdict, Verdict::Error);
    assert!(
        report
            .grade
            .tests
            .iter()
            .all(|t| t.category == Some(Category::Infra))
    );
}

#[test]
fn a_missing_base_image_is_an_infra_error() {
    if !docker_ready() {
        return;
    }
    let variant = task_variant(&[("base_image", "\"infradev-base:does-not-exist\"")]);
    let g = grade(
        &variant.path().join(support::TASK),
        example_repo(),
        "submission/reference",
        "docker",
        &[],
    );
    assert_eq!(g.code, 3, "{}", g.stdout);
    assert_eq!(g.report().grade.verdict, Verdict::Error);
    assert!(
        g.all_output().contains("runners/base-image/build.sh"),
        "the error says how to fix it:\n{}",
        g.stdout
    );
}

#[test]
fn orphaned_sandbox_containers_are_reaped() {
    if !docker_ready() {
        return;
    }
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let orphan = docker(&[
        "create",
        "--label",
        "org.infradev.managed=true",
        "--label",
        "org.infradev.deadline=1",
        support::BASE_IMAGE,
        "true",
    ]);
    // A build container of a grader killed while it made an environment image.
    let build = docker(&[
        "create",
        "--label",
        "org.infradev.managed=build",
        "--label",
        "org.infradev.deadline=1",
        support::BASE_IMAGE,
        "true",
    ]);
    let g = grade_example("submission/reference", "docker");
    assert_eq!(g.report().grade.verdict, Verdict::Resolved, "{}", g.stdout);
    let left = docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        "label=org.infradev.deadline=1",
    ]);
    for gone in [&orphan, &build] {
        assert!(
            !left.contains(gone.as_str()),
            "the orphan {gone} is still there"
        );
    }
}
