//! `infradev doctor` through the real binary: a broken setup fails with one line per check,
//! a working one passes.

mod support;

use std::process::Command;

use support::{docker_ready, root};

fn doctor(root: &std::path::Path, env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root)
        .arg("doctor")
        .envs(env.iter().copied())
        .env_remove("INFRADEV_WHEELS")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_broken_setup_fails_with_a_line_per_check() {
    let empty = tempfile::tempdir().unwrap();
    let (code, text) = doctor(
        empty.path(),
        &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")],
    );
    assert_eq!(code, 3, "{text}");
    for want in [
        "FAIL tasks: no task under",
        "FAIL runners:",
        "ok   git: found",
        "FAIL docker: cannot reach the Docker Engine",
        "3 check(s) failed",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    // One line per check, nothing else.
    assert_eq!(text.lines().count(), 7, "{text}");
}

#[test]
fn a_missing_base_image_is_named() {
    if !docker_ready() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let task = scratch.path().join("tasks/example").join(support::TASK);
    support::copy_dir(&support::task_dir(), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        toml.replace("infradev-base:bookworm", "infradev-missing:never-built"),
    )
    .unwrap();
    support::copy_dir(
        &support::probes_dir(),
        &scratch.path().join("probes").join(support::TASK),
    );
    support::copy_dir(
        &root().join("runners/python"),
        &scratch.path().join("runners/python"),
    );
    let (code, text) = doctor(scratch.path(), &[]);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("ok   docker: the Docker Engine answers"),
        "{text}"
    );
    assert!(
        text.contains("FAIL base image: infradev-missing:never-built is missing"),
        "{text}"
    );
    assert!(text.contains("ok   tasks: 1 task(s)"), "{text}");
}

#[test]
fn the_checkout_passes() {
    if !docker_ready() {
        return;
    }
    let (code, text) = doctor(&root(), &[]);
    assert!(
        text.contains("ok   base image: infradev-base:bookworm"),
        "{text}"
    );
    assert!(text.contains("ok   docker"), "{text}");
    // Tasks that install packages need a wheel cache: a warning, not a failure.
    assert_eq!(code, 0, "{text}");
}
