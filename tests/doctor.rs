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
