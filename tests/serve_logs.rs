//! `infradev serve` logs through the real binary: `--log-format json` writes one JSON object
//! per line (the start, every fault once, the error that ends the process), SIGTERM ends it with
//! exit 0 and one line saying what the drain did, and no format
//! writes ANSI codes when standard error is not a terminal.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A server configuration whose GitHub API is a closed port: every GitHub call is a fault.
fn config(dir: &Path) -> std::path::PathBuf {
    let key = support::fake_github::app_key();
    std::fs::write(dir.join("app.pem"), &key.private_pem).unwrap();
    std::fs::write(dir.join("secrets"), "s3cret\n").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let path = dir.join("infradev.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:0\"\nroot = \"{root}\"\nwork_dir = \"{d}/work\"\n\
             [github]\napi_url = \"{api}\"\napp_id = 1\nprivate_key_file = \"{d}/app.pem\"\n\
             webhook_secrets_file = \"{d}/secrets\"\n\
             [store]\nurl = \"sqlite://{d}/infradev.db\"\n[worker]\nconcurrency = 0\n",
            root = support::root().display(),
            d = dir.display()
        ),
    )
    .unwrap();
    path
}

fn serve(config: &Path, format: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_infradev"))
        .args(["--log-format", format, "serve", "--config"])
        .arg(config)
        .env_remove("INFRADEV_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Standard error's lines until `done` says so (or 60 s pass), then the process is killed.
fn lines_until(mut child: Child, done: impl Fn(&str) -> bool) -> Vec<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let stop = done(&line);
                lines.push(line);
                if stop {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    lines
}

#[test]
fn json_logs_are_one_object_per_line_and_each_fault_is_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let lines = lines_until(serve(&config, "json"), |l| {
        l.contains("could not reach GitHub")
    });
    let all = lines.join("\n");
    assert!(
        !all.contains('\u{1b}'),
        "no ANSI codes off a terminal:\n{all}"
    );
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for e in &events {
        assert!(e["level"].is_string() && e["timestamp"].is_string(), "{e}");
        assert!(e["fields"]["message"].is_string(), "{e}");
    }
    let serving = events
        .iter()
        .find(|e| e["fields"]["message"] == "serving")
        .unwrap_or_else(|| panic!("the start is logged:\n{all}"));
    assert!(
        serving["fields"]["addr"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    let faults: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["level"] == "WARN" || e["level"] == "ERROR")
        .collect();
    assert!(
        faults.iter().any(|e| e["fields"]["error"]
            .as_str()
            .is_some_and(|m| m.contains("could not reach GitHub"))),
        "the unreachable API is a fault, with its cause on the line:\n{all}"
    );
    // One line per fault: the client library's own line about the same request is not
    // written beside ours.
    assert!(
        !events.iter().any(|e| e["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("octocrab"))),
        "{all}"
    );
}

#[test]
fn text_logs_carry_no_ansi_codes_off_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    // Both lines, in whichever order: the reconcile loop can meet the unreachable API before
    // the command prints its address.
    let (seen_fault, seen_listening) = (std::cell::Cell::new(false), std::cell::Cell::new(false));
    let lines = lines_until(serve(&config, "text"), |l| {
        seen_fault.set(seen_fault.get() || l.contains("could not reach GitHub"));
        seen_listening.set(seen_listening.get() || l.contains("infradev: listening on"));
        seen_fault.get() && seen_listening.get()
    });
    let all = lines.join("\n");
    assert!(
        all.contains("infradev: listening on http://127.0.0.1:"),
        "{all}"
    );
    assert!(all.contains("could not reach GitHub"), "{all}");
    assert!(
        !all.contains('\u{1b}'),
        "no ANSI codes off a terminal:\n{all}"
    );
}

#[test]
fn the_error_that_ends_the_process_is_a_json_line_too() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("infradev.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\ncolour = \"red\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .args(["--log-format", "json", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert_eq!(last["fields"]["exit_code"], 2, "{stderr}");
    assert!(
        last["fields"]["error"].as_str().unwrap().contains("colour"),
        "{stderr}"
    );
    for line in stderr.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }
}

#[test]
fn sigterm_stops_a_server_that_does_not_grade_with_exit_0_and_one_drain_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let mut child = serve(&config, "json");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("\"serving\""));
    assert!(serving.is_some(), "the server starts");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Standard error ends with the process.
    let rest: Vec<serde_json::Value> = lines
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{rest:?}");
    let drained: Vec<&serde_json::Value> = rest
        .iter()
        .filter(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("drained"))
        })
        .collect();
    assert_eq!(
        drained.len(),
        1,
        "one line says what the drain did: {rest:?}"
    );
    assert_eq!(drained[0]["fields"]["finished"], 0);
    assert_eq!(drained[0]["fields"]["requeued"], 0);
}
