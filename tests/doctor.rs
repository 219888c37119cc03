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

/// A closed local port: nothing answers there.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn server_config(dir: &std::path::Path, store: &str, api: &str) -> std::path::PathBuf {
    let path = dir.join("infradev.toml");
    std::fs::write(
        &path,
        format!("[github]\napi_url = \"{api}\"\napp_id = 1\n[store]\nurl = \"{store}\"\n"),
    )
    .unwrap();
    path
}

/// `--config`: the store and GitHub that `serve` needs, and the layers the tasks name, each a
/// line of its own; broken ones fail and say what is wrong.
#[test]
fn a_broken_server_setup_names_its_store_github_and_layers() {
    let scratch = tempfile::tempdir().unwrap();
    let task = scratch.path().join("tasks/example").join(support::TASK);
    support::copy_dir(&support::task_dir(), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        toml.replace(
            "python = \"3.11\"",
            "python = \"3.11\"\nlayer = \"no-such-layer\"",
        ),
    )
    .unwrap();
    support::copy_dir(
        &support::probes_dir(),
        &scratch.path().join("probes").join(support::TASK),
    );
    let pg = format!(
        "postgres://infradev:pw@127.0.0.1:{}/infradev",
        closed_port()
    );
    let api = format!("http://127.0.0.1:{}", closed_port());
    let config = server_config(scratch.path(), &pg, &api);
    let (code, text) = doctor_with(scratch.path(), &["--config", &config.display().to_string()]);
    assert_eq!(code, 3, "{text}");
    for want in [
        "FAIL layer: no-such-layer: ".to_owned(),
        format!(
            "runners/layers/no-such-layer/requirements.txt is missing (needed by {})",
            support::TASK
        ),
        format!("ok   config: {}", config.display()),
        format!(
            "FAIL store: 127.0.0.1:{}",
            pg.rsplit(':').next().unwrap().split('/').next().unwrap()
        ),
        "connecting to the store".to_owned(),
        format!("FAIL github: cannot reach {api}"),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
    assert!(
        !text.contains("pw@"),
        "the store's password is never printed:\n{text}"
    );

    // A configuration that does not parse is a line too.
    std::fs::write(&config, "colour = \"red\"\n").unwrap();
    let (code, text) = doctor_with(scratch.path(), &["--config", &config.display().to_string()]);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("FAIL config: "), "{text}");
}

/// A SQLite store: empty before `serve` first opens it, up to date after.
#[test]
fn the_store_s_migration_state_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("infradev.db");
    let url = format!("sqlite://{}", db.display());
    // An answering "API": any HTTP answer means reachable.
    let api = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api_url = format!("http://{}", api.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut s in api.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let config = server_config(dir.path(), &url, &api_url);
    let arg = config.display().to_string();
    let (_, text) = doctor_with(&root(), &["--config", &arg]);
    assert!(text.contains("ok   store: sqlite"), "{text}");
    assert!(
        text.contains(": empty; `serve` applies migrations 1-"),
        "{text}"
    );
    assert!(
        text.contains(&format!("ok   github: {api_url} answers (HTTP 401)")),
        "{text}"
    );
    assert!(!db.exists(), "doctor creates nothing");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let latest = rt.block_on(async {
        let store = infradev::service::store::Store::open(&url).await.unwrap();
        let v = store.latest_schema_version();
        store.close().await;
        v
    });
    let (_, text) = doctor_with(&root(), &["--config", &arg]);
    assert!(
        text.contains(&format!("schema {latest}, up to date")),
        "{text}"
    );
}

fn doctor_with(root: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root)
        .arg("doctor")
        .args(args)
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

// The first hour: every command works from any folder, says what is wrong when it cannot find
// its tasks, and survives a reader that stops early.

fn infradev_in(
    dir: &std::path::Path,
    exe: &std::path::Path,
    args: &[&str],
) -> (i32, String, String) {
    let out = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env_remove("INFRADEV_ROOT")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_task_root_is_found_from_any_folder_or_named_when_it_is_not() {
    let elsewhere = tempfile::tempdir().unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_infradev"));
    // From an unrelated folder: the binary's own clone is found (target/debug/infradev).
    let (code, out, err) = infradev_in(elsewhere.path(), exe, &["tasks", "list"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("example-block-allocator"), "{out}{err}");
    // From inside the clone, any depth.
    let (code, out, _) = infradev_in(&root().join("runners/python"), exe, &["tasks", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("example-block-allocator"));
    // A binary with no task root above it or its folder: said, with what to do, exit 2.
    let lone = elsewhere.path().join("bin");
    std::fs::create_dir(&lone).unwrap();
    std::fs::copy(exe, lone.join("infradev")).unwrap();
    let (code, out, err) =
        infradev_in(elsewhere.path(), &lone.join("infradev"), &["tasks", "list"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("no task root found") && err.contains("--root"),
        "{err}"
    );
    // A --root with no task in it: said, exit 2 (it printed nothing and exited 0).
    let (code, _, err) = infradev_in(
        elsewhere.path(),
        exe,
        &[
            "--root",
            elsewhere.path().to_str().unwrap(),
            "tasks",
            "list",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no task under"), "{err}");
}

#[test]
fn a_reader_that_stops_early_ends_the_output_not_the_process() {
    let err = tempfile::NamedTempFile::new().unwrap();
    let script = format!(
        "set -o pipefail; '{}' --root '{}' tasks list 2>'{}' | true",
        env!("CARGO_BIN_EXE_infradev"),
        root().display(),
        err.path().display()
    );
    let status = Command::new("bash").args(["-c", &script]).status().unwrap();
    let stderr = std::fs::read_to_string(err.path()).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn tasks_show_prints_what_a_person_reads() {
    let (code, out, err) = infradev_in(
        &root(),
        std::path::Path::new(env!("CARGO_BIN_EXE_infradev")),
        &["tasks", "show", "example-block-allocator"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resources   0 GPUs,"), "{out}");
    assert!(!out.contains("Count("), "{out}");
}
