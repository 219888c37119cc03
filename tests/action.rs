//! `infradev action` end to end, told as stories: the real binary in a GitHub Actions-shaped
//! environment (a real `pull_request` event payload, a checkout, step summary and output
//! files), real git and real Docker, and the fake github.com on loopback that checks every
//! request against GitHub's OpenAPI description.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use secrecy::ExposeSecret;
use serde_json::{Value, json};
use support::fake_github::{Failure, FakeGitHub};
use support::payloads::{self, Author, OWNER, REPO};

const INSTALLATION: u64 = 5_151_515;
const REPO_FULL: &str = "infradev-mirrors/minicache";
const NUMBER: u64 = 42;
const CANARIES: [&str; 2] = ["PROBE-SECRET-", "INFRADEV-PROBE-CANARY"];

fn rev(name: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(support::example_repo())
        .args(["rev-parse", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The fake, with the App installed on the mirror, and a real installation token minted from it.
async fn github() -> (FakeGitHub, String) {
    let fake = FakeGitHub::start().await;
    fake.add_installation(INSTALLATION, &[REPO_FULL]);
    let token = fake
        .app()
        .installation_token(INSTALLATION)
        .await
        .expect("an installation token from the fake");
    (fake, token.expose_secret().to_owned())
}

/// A real `pull_request` `opened` payload for PR 42 at `head` into `base_ref`, as a workflow
/// sees it (no `installation`); from a fork when `fork`.
fn event(head: &str, base_ref: &str, fork: bool) -> Value {
    let mut v = payloads::pull_request(
        "opened.json",
        INSTALLATION,
        NUMBER,
        head,
        support::TASK,
        Author::Agent,
    );
    v.as_object_mut().unwrap().remove("installation");
    v["pull_request"]["base"]["ref"] = json!(base_ref);
    if !fork {
        v["pull_request"]["head"]["repo"]["full_name"] = json!(REPO_FULL);
        v["pull_request"]["head"]["repo"]["clone_url"] =
            json!(format!("https://github.com/{OWNER}/{REPO}.git"));
    }
    v
}

fn task_base() -> String {
    format!("infradev/{}", support::TASK)
}

/// What one run of `infradev action` left behind.
struct Step {
    code: i32,
    stdout: String,
    stderr: String,
    summary: String,
    outputs: BTreeMap<String, String>,
    report: String,
    _dir: tempfile::TempDir,
}

impl Step {
    fn output(&self, name: &str) -> &str {
        self.outputs
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no output {name}: {:?}", self.outputs))
    }

    fn errors(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with("::error"))
            .collect()
    }

    fn explain(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}\n--- summary\n{}\n--- outputs\n{:?}",
            self.code, self.stdout, self.stderr, self.summary, self.outputs
        )
    }
}

/// `$GITHUB_OUTPUT`'s `name=value` lines (and the delimiter form).
fn parse_outputs(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delimiter)) = line.split_once("<<") {
            let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
            out.insert(name.to_owned(), value.join("\n"));
        } else if let Some((name, value)) = line.split_once('=') {
            out.insert(name.to_owned(), value.to_owned());
        }
    }
    out
}

/// Runs the real binary as a workflow step would: `GITHUB_*` from a fresh temp dir, the example
/// repository as the workspace, the fake as the API.
async fn step(
    fake: &FakeGitHub,
    event_name: &str,
    payload: &Value,
    token: Option<&str>,
    args: &[&str],
) -> Step {
    step_env(fake, event_name, payload, token, args, &[]).await
}

/// [`step`] with more environment variables.
async fn step_env(
    fake: &FakeGitHub,
    event_name: &str,
    payload: &Value,
    token: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Step {
    let dir = tempfile::tempdir().unwrap();
    let event_path = dir.path().join("event.json");
    std::fs::write(&event_path, serde_json::to_vec_pretty(payload).unwrap()).unwrap();
    let summary = dir.path().join("summary.md");
    let output = dir.path().join("output.txt");
    let report = dir.path().join("report.json");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_infradev"));
    for (name, _) in std::env::vars() {
        if name.starts_with("GITHUB_") || name.starts_with("INFRADEV_") || name == "RUNNER_TEMP" {
            cmd.env_remove(name);
        }
    }
    cmd.arg("--root")
        .arg(support::root())
        .arg("action")
        .args(
            (!args.contains(&"--executor"))
                .then_some(["--executor", "docker"])
                .into_iter()
                .flatten(),
        )
        .arg("--report-path")
        .arg(&report)
        .args(args)
        .env("GITHUB_EVENT_NAME", event_name)
        .env("GITHUB_EVENT_PATH", &event_path)
        .env("GITHUB_REPOSITORY", REPO_FULL)
        .env("GITHUB_API_URL", fake.url())
        .env("GITHUB_WORKSPACE", support::example_repo())
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", &output)
        .env("RUNNER_TEMP", dir.path());
    if let Some(token) = token {
        cmd.env("INFRADEV_GITHUB_TOKEN", token);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().await.expect("run infradev action");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Step {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        summary: read(&summary),
        outputs: parse_outputs(&read(&output)),
        report: read(&report),
        _dir: dir,
    }
}

fn probes() -> String {
    support::probes_dir().display().to_string()
}

/// Requests that change something on GitHub.
fn writes(fake: &FakeGitHub) -> Vec<String> {
    fake.requests()
        .into_iter()
        .filter(|r| r.method != http::Method::GET)
        .filter(|r| r.operation != "apps/create-installation-access-token")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn assert_no_canary(fake: &FakeGitHub, step: &Step) {
    let sent: String = fake
        .requests()
        .iter()
        .filter_map(|r| r.body.as_ref().map(Value::to_string))
        .collect::<Vec<_>>()
        .join("\n");
    let outputs = format!("{:?}", step.outputs);
    for canary in CANARIES {
        for (what, text) in [
            ("stdout", &step.stdout),
            ("stderr", &step.stderr),
            ("summary", &step.summary),
            ("outputs", &outputs),
            ("report", &step.report),
            ("requests", &sent),
        ] {
            assert!(!text.contains(canary), "{canary} leaked in {what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resolved_posts_a_successful_check_and_one_sticky_comment() {
    if !support::docker_ready() {
        return;
    }
    let (fake, token) = github().await;
    let head = rev("submission/reference");
    let step = step(
        &fake,
        "pull_request_target",
        &event(&head, &task_base(), false),
        Some(&token),
        &["--probes", &probes()],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 0, "{why}");
    assert_eq!(step.output("verdict"), "resolved", "{why}");
    let (passed, total) = step.output("score").split_once('/').unwrap();
    assert_eq!(passed, total, "{why}");
    assert_eq!(step.output("categories"), "", "{why}");
    assert!(step.output("report-path").ends_with("report.json"), "{why}");
    let report: Value = serde_json::from_str(&step.report).expect("the JSON report");
    assert_eq!(report["grade"]["verdict"], "resolved");
    assert!(step.errors().is_empty(), "{why}");
    assert!(step.summary.starts_with("## InfraDev\n"), "{why}");
    assert!(step.summary.contains("**Resolved**"), "{why}");
    assert!(step.summary.contains("| hidden probes |"), "{why}");

    let runs = fake.check_runs(REPO_FULL);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].name, "InfraDev");
    assert_eq!(runs[0].head_sha, head);
    assert_eq!(runs[0].status, "completed");
    assert_eq!(runs[0].conclusion.as_deref(), Some("success"));
    let comments = fake.comments(REPO_FULL, NUMBER);
    assert_eq!(comments.len(), 1);
    assert!(comments[0].body.starts_with("<!-- infradev:sticky -->"));
    assert_no_canary(&fake, &step);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn unresolved_annotates_and_fails_the_step_without_leaking_probes() {
    if !support::docker_ready() {
        return;
    }
    let (fake, token) = github().await;
    let head = rev("submission/wrong");
    let step = step(
        &fake,
        "pull_request_target",
        &event(&head, &task_base(), false),
        Some(&token),
        &["--probes", &probes(), "--fail-on", "unresolved"],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 1, "{why}");
    assert_eq!(step.output("verdict"), "unresolved", "{why}");
    let categories: Vec<&str> = step.output("categories").split(',').collect();
    for c in ["memory", "time", "state"] {
        assert!(categories.contains(&c), "{c} missing: {why}");
    }
    let (passed, total) = step.output("score").split_once('/').unwrap();
    assert!(passed.parse::<u32>().unwrap() < total.parse::<u32>().unwrap());
    let errors = step.errors();
    assert!(!errors.is_empty(), "{why}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("title=InfraDev memory%3A hidden probe")),
        "{why}"
    );
    assert!(step.summary.contains("| failure category |"), "{why}");
    assert!(step.summary.contains("| memory |"), "{why}");

    let runs = fake.check_runs(REPO_FULL);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].conclusion.as_deref(), Some("failure"));
    assert_eq!(fake.comments(REPO_FULL, NUMBER).len(), 1);
    assert_no_canary(&fake, &step);
    fake.assert_no_violations();

    // The same grade under `--fail-on error` or `never` does not fail the step.
    let (fake, token) = github().await;
    let lenient = step_with(&fake, &token, &head, &["--fail-on", "error"]).await;
    assert_eq!(lenient.code, 0, "{}", lenient.explain());
    assert_eq!(lenient.output("verdict"), "unresolved");
    fake.assert_no_violations();
}

async fn step_with(fake: &FakeGitHub, token: &str, head: &str, extra: &[&str]) -> Step {
    let probes = probes();
    let mut args = vec!["--probes", probes.as_str()];
    args.extend_from_slice(extra);
    step(
        fake,
        "pull_request_target",
        &event(head, &task_base(), false),
        Some(token),
        &args,
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_infra_error_is_neutral_and_exits_3() {
    if !support::docker_ready() {
        return;
    }
    let (fake, token) = github().await;
    let variant = support::task_variant(&[("base_image", "\"infradev-base:does-not-exist\"")]);
    let task = variant.path().join(support::TASK);
    let head = rev("submission/reference");
    let step = step(
        &fake,
        "pull_request_target",
        &event(&head, "main", false),
        Some(&token),
        &[
            "--probes",
            &probes(),
            "--task",
            &task.display().to_string(),
            // Not what was validated (its image differs): allowed, so that the missing
            // image, our fault, is what the grade meets.
            "--allow-unvalidated",
        ],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 3, "{why}");
    assert_eq!(step.output("verdict"), "error", "{why}");
    assert_eq!(step.output("categories"), "infra", "{why}");
    assert!(
        step.errors().is_empty(),
        "infra is never the PR's error: {why}"
    );
    assert!(step.stdout.contains("::warning title=InfraDev"), "{why}");
    assert!(step.summary.contains("our fault"), "{why}");
    let runs = fake.check_runs(REPO_FULL);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].conclusion.as_deref(), Some("neutral"));
    assert_no_canary(&fake, &step);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pr_that_names_no_task_is_not_a_task() {
    let (fake, token) = github().await;
    let head = rev("submission/reference");
    let step = step(
        &fake,
        "pull_request_target",
        &event(&head, "main", false),
        Some(&token),
        &["--probes", &probes()],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 0, "{why}");
    assert_eq!(step.output("verdict"), "not-a-task", "{why}");
    assert_eq!(step.output("score"), "", "{why}");
    assert!(step.stdout.starts_with("::notice title=InfraDev"), "{why}");
    assert!(step.summary.contains("names no InfraDev task"), "{why}");
    assert!(step.summary.contains("`example-block-allocator`"), "{why}");
    let runs = fake.check_runs(REPO_FULL);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].conclusion.as_deref(), Some("neutral"));
    assert!(fake.comments(REPO_FULL, NUMBER).is_empty());
    fake.assert_no_violations();

    // An unknown task id is not a task either; a 403 on the write is said plainly.
    let (fake, token) = github().await;
    fake.fail_next(
        "POST /repos/*/*/check-runs",
        1,
        Failure::Status {
            status: 403,
            message: "Resource not accessible by integration".into(),
        },
    );
    let step = self::step(
        &fake,
        "pull_request_target",
        &event(&head, "infradev/no-such-task", false),
        Some(&token),
        &[],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 0, "{why}");
    assert_eq!(step.output("verdict"), "not-a-task", "{why}");
    assert!(step.summary.contains("`no-such-task`"), "{why}");
    assert!(step.summary.contains("(403)"), "{why}");
    assert!(
        step.summary
            .contains("This is not the pull request's failure"),
        "{why}"
    );
    assert!(fake.check_runs(REPO_FULL).is_empty());
    fake.assert_no_violations();
}

/// A fork's pull request is graded and reported like any other: `pull_request_target` gives
/// the base branch's workflow a write token, and the fork's code only runs in the sandbox.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_pr_gets_the_check_run_and_the_comment() {
    if !support::docker_ready() {
        return;
    }
    let (fake, token) = github().await;
    let head = rev("submission/wrong");
    let step = step(
        &fake,
        "pull_request_target",
        &event(&head, &task_base(), true),
        Some(&token),
        &["--probes", &probes()],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 1, "{why}");
    assert_eq!(step.output("verdict"), "unresolved", "{why}");
    assert!(step.summary.contains("| failure category |"), "{why}");
    let runs = fake.check_runs(REPO_FULL);
    assert_eq!(runs.len(), 1, "{why}");
    assert_eq!(runs[0].conclusion.as_deref(), Some("failure"));
    assert_no_canary(&fake, &step);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_probe_directory_is_a_usage_error() {
    let (fake, token) = github().await;
    let head = rev("submission/reference");
    let step = step(
        &fake,
        "pull_request_target",
        &event(&head, &task_base(), false),
        Some(&token),
        &["--probes", "/nonexistent"],
    )
    .await;
    let why = step.explain();
    assert_eq!(step.code, 2, "{why}");
    assert_eq!(step.output("verdict"), "error", "{why}");
    assert!(step.stderr.contains("/nonexistent"), "{why}");
    assert!(step.summary.contains("/nonexistent"), "{why}");
    assert!(
        step.stdout
            .starts_with("::error title=InfraDev%3A cannot grade"),
        "{why}"
    );
    assert_eq!(writes(&fake), Vec::<String>::new());
    fake.assert_no_violations();

    // Under `--fail-on never` the step passes and the output still says so.
    let step = self::step(
        &fake,
        "pull_request_target",
        &event(&head, &task_base(), false),
        Some(&token),
        &["--probes", "/nonexistent", "--fail-on", "never"],
    )
    .await;
    assert_eq!(step.code, 0, "{}", step.explain());
    assert_eq!(step.output("verdict"), "error");
}

/// Under `pull_request`, GitHub runs the pull request's own version of the workflow (with the
/// repository's secrets for a same-repository PR): a PR that rewrites the workflow reads
/// whatever fetched the probes. The step refuses that event, a workflow taken from a PR ref,
/// and the local executor (which would run PR code beside the probes on the runner).
#[tokio::test(flavor = "multi_thread")]
async fn setups_that_cannot_hide_the_probes_are_refused() {
    let (fake, token) = github().await;
    let head = rev("submission/reference");
    let event = event(&head, &task_base(), false);
    let probes = probes();
    let refused = [
        (
            "pull_request",
            vec!["--probes", probes.as_str()],
            "pull_request_target",
        ),
        (
            "pull_request_target",
            vec!["--probes", probes.as_str(), "--executor", "local"],
            "Docker executor only",
        ),
    ];
    for (event_name, args, says) in refused {
        let step = step(&fake, event_name, &event, Some(&token), &args).await;
        assert_eq!(step.code, 2, "{event_name}: {}", step.explain());
        assert!(
            step.summary.contains(says),
            "{event_name}: {}",
            step.explain()
        );
    }
    let step = step_env(
        &fake,
        "pull_request_target",
        &event,
        Some(&token),
        &["--probes", &probes],
        &[(
            "GITHUB_WORKFLOW_REF",
            "infradev-mirrors/minicache/.github/workflows/infradev.yml@refs/pull/7/merge",
        )],
    )
    .await;
    assert_eq!(step.code, 2, "{}", step.explain());
    assert!(
        step.summary.contains("pull request ref"),
        "{}",
        step.explain()
    );
    assert_eq!(writes(&fake), Vec::<String>::new());
}
