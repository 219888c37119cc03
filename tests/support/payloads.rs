//! Real webhook payloads from tests/fixtures/github/webhooks, re-pointed at the test world
//! (repository, PR number, head SHA, author, installation) and signed for real.

use serde_json::{Value, json};

use super::fake_github::FakeWorkflowRun;

pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/github/webhooks"
);

/// The mirror repository the App is installed on in the test world.
pub const OWNER: &str = "infradev-mirrors";
pub const REPO: &str = "minicache";
/// Where agent PRs come from.
pub const FORK_OWNER: &str = "coding-agent";

pub fn fixture(event: &str, file: &str) -> Value {
    let path = format!("{FIXTURES}/{event}/{file}");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .expect("fixture JSON")
}

fn set(v: &mut Value, pointer: &str, new: Value) {
    *v.pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the fixture")) = new;
}

/// Points `repository` and `installation` at the test world.
pub fn retarget(mut v: Value, installation_id: u64) -> Value {
    set(&mut v, "/repository/name", json!(REPO));
    set(
        &mut v,
        "/repository/full_name",
        json!(format!("{OWNER}/{REPO}")),
    );
    set(&mut v, "/repository/owner/login", json!(OWNER));
    v["installation"] =
        json!({ "id": installation_id, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ==" });
    v
}

/// Who opened a PR.
#[derive(Clone, Copy)]
pub enum Author<'a> {
    Agent,
    Human(&'a str),
}

/// A `pull_request` event (`opened.json`, `synchronize.json`, …) for PR `number` at `head_sha`.
pub fn pull_request(
    file: &str,
    installation_id: u64,
    number: u64,
    head_sha: &str,
    task: &str,
    author: Author<'_>,
) -> Value {
    let mut v = retarget(fixture("pull_request", file), installation_id);
    set(&mut v, "/number", json!(number));
    set(&mut v, "/pull_request/number", json!(number));
    set(&mut v, "/pull_request/head/sha", json!(head_sha));
    let head_ref = match author {
        Author::Agent => "agent/prefix-caching",
        Author::Human(_) => "feature/prefix-caching",
    };
    set(&mut v, "/pull_request/head/ref", json!(head_ref));
    set(
        &mut v,
        "/pull_request/head/repo/full_name",
        json!(format!("{FORK_OWNER}/{REPO}")),
    );
    set(
        &mut v,
        "/pull_request/head/repo/clone_url",
        json!(format!("https://github.com/{FORK_OWNER}/{REPO}.git")),
    );
    set(
        &mut v,
        "/pull_request/base/ref",
        json!(format!("infradev/{task}")),
    );
    set(
        &mut v,
        "/pull_request/base/repo/full_name",
        json!(format!("{OWNER}/{REPO}")),
    );
    set(&mut v, "/pull_request/draft", json!(false));
    set(&mut v, "/pull_request/state", json!("open"));
    set(&mut v, "/pull_request/labels", json!([]));
    let (login, kind) = match author {
        Author::Agent => (format!("{FORK_OWNER}[bot]"), "Bot"),
        Author::Human(login) => (login.to_owned(), "User"),
    };
    set(&mut v, "/pull_request/user/login", json!(login));
    set(&mut v, "/pull_request/user/type", json!(kind));
    v
}

/// A `check_run` event on `head_sha`, with an empty `pull_requests` list as GitHub sends for
/// fork heads.
pub fn check_run(file: &str, installation_id: u64, head_sha: &str, external_id: &str) -> Value {
    let mut v = retarget(fixture("check_run", file), installation_id);
    set(&mut v, "/check_run/head_sha", json!(head_sha));
    set(&mut v, "/check_run/external_id", json!(external_id));
    set(&mut v, "/check_run/name", json!("InfraDev"));
    set(&mut v, "/check_run/pull_requests", json!([]));
    set(&mut v, "/check_run/check_suite/head_sha", json!(head_sha));
    v
}

pub fn check_suite(file: &str, installation_id: u64, head_sha: &str) -> Value {
    let mut v = retarget(fixture("check_suite", file), installation_id);
    set(&mut v, "/check_suite/head_sha", json!(head_sha));
    set(&mut v, "/check_suite/pull_requests", json!([]));
    v
}

/// An `issue_comment` `created` event on PR `number` by `login`.
pub fn comment(installation_id: u64, number: u64, login: &str, body: &str) -> Value {
    let mut v = retarget(fixture("issue_comment", "created.json"), installation_id);
    set(&mut v, "/issue/number", json!(number));
    v["issue"]["pull_request"] =
        json!({ "url": format!("https://api.github.com/repos/{OWNER}/{REPO}/pulls/{number}") });
    set(&mut v, "/comment/body", json!(body));
    set(&mut v, "/comment/user/login", json!(login));
    set(&mut v, "/comment/user/type", json!("User"));
    v
}

/// Points `repository` (and `installation`) at `repo_full` (`owner/name`): any repository, such
/// as the private grader repository workflow runs live in.
fn retarget_to(mut v: Value, installation_id: u64, repo_full: &str) -> Value {
    let (owner, name) = repo_full
        .split_once('/')
        .unwrap_or_else(|| panic!("{repo_full:?} is not owner/name"));
    set(&mut v, "/repository/name", json!(name));
    set(&mut v, "/repository/full_name", json!(repo_full));
    set(&mut v, "/repository/owner/login", json!(owner));
    set(
        &mut v,
        "/repository/html_url",
        json!(format!("https://github.com/{repo_full}")),
    );
    set(
        &mut v,
        "/repository/url",
        json!(format!("https://api.github.com/repos/{repo_full}")),
    );
    v["installation"] =
        json!({ "id": installation_id, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ==" });
    v
}

/// A `workflow_run` event for `run` of `repo_full` (the grader repository) as it is now:
/// `requested.json` or `completed.json` (whichever is nearer to `action`) with the run's id,
/// status, conclusion, name, attempt, workflow file and ref written over the fixture's.
pub fn workflow_run(
    action: &str,
    installation_id: u64,
    repo_full: &str,
    run: &FakeWorkflowRun,
) -> Value {
    let file = if action == "completed" {
        "completed.json"
    } else {
        "requested.json"
    };
    let mut v = retarget_to(fixture("workflow_run", file), installation_id, repo_full);
    let id = run.id;
    let runs = format!("https://api.github.com/repos/{repo_full}/actions/runs/{id}");
    set(&mut v, "/action", json!(action));
    let name = run
        .workflow
        .trim_end_matches(".yml")
        .trim_end_matches(".yaml");
    let path = format!(".github/workflows/{}", run.workflow);
    set(&mut v, "/workflow/name", json!(name));
    set(&mut v, "/workflow/path", json!(path));
    let r = &mut v["workflow_run"];
    set(r, "/id", json!(id));
    set(r, "/name", json!(name));
    set(r, "/path", json!(path));
    set(r, "/event", json!("workflow_dispatch"));
    set(r, "/head_branch", json!(run.git_ref));
    set(r, "/display_title", json!(run.display_title));
    set(r, "/status", json!(run.status));
    set(r, "/conclusion", json!(run.conclusion));
    set(r, "/run_attempt", json!(run.run_attempt));
    set(r, "/run_number", json!(id));
    set(r, "/pull_requests", json!([]));
    set(r, "/url", json!(runs));
    set(
        r,
        "/html_url",
        json!(format!("https://github.com/{repo_full}/actions/runs/{id}")),
    );
    for (field, tail) in [
        ("jobs_url", "/jobs"),
        ("logs_url", "/logs"),
        ("artifacts_url", "/artifacts"),
        ("cancel_url", "/cancel"),
        ("rerun_url", "/rerun"),
    ] {
        set(r, &format!("/{field}"), json!(format!("{runs}{tail}")));
    }
    let name = repo_full.split_once('/').map_or(repo_full, |(_, n)| n);
    for repo in ["/repository", "/head_repository"] {
        set(r, &format!("{repo}/name"), json!(name));
        set(r, &format!("{repo}/full_name"), json!(repo_full));
    }
    v
}

/// A `workflow_job` event for job `job_id` of `run` in `repo_full`: the fixture of `action`
/// (`queued`, `waiting`, `in_progress`, `completed`) with the job's ids, status (from the
/// action), `conclusion`, `runner_name` (`None` while it waits for a runner) and the run's
/// `runs_on` input as its labels.
pub fn workflow_job(
    action: &str,
    installation_id: u64,
    repo_full: &str,
    run: &FakeWorkflowRun,
    job_id: u64,
    runner_name: Option<&str>,
    conclusion: Option<&str>,
) -> Value {
    let (file, status) = match action {
        "queued" => ("queued.json", "queued"),
        "waiting" => ("waiting.json", "waiting"),
        "in_progress" => ("in_progress.json", "in_progress"),
        "completed" => ("completed.success.with-organization.json", "completed"),
        other => panic!("no workflow_job fixture for action {other:?}"),
    };
    let mut v = retarget_to(fixture("workflow_job", file), installation_id, repo_full);
    set(&mut v, "/action", json!(action));
    let j = &mut v["workflow_job"];
    set(j, "/id", json!(job_id));
    set(j, "/run_id", json!(run.id));
    set(j, "/run_attempt", json!(run.run_attempt));
    set(j, "/head_branch", json!(run.git_ref));
    set(j, "/status", json!(status));
    set(j, "/conclusion", json!(conclusion));
    set(j, "/name", json!("grade"));
    set(
        j,
        "/workflow_name",
        json!(
            run.workflow
                .trim_end_matches(".yml")
                .trim_end_matches(".yaml")
        ),
    );
    set(j, "/runner_name", json!(runner_name));
    set(
        j,
        "/run_url",
        json!(format!(
            "https://api.github.com/repos/{repo_full}/actions/runs/{}",
            run.id
        )),
    );
    set(
        j,
        "/url",
        json!(format!(
            "https://api.github.com/repos/{repo_full}/actions/jobs/{job_id}"
        )),
    );
    set(
        j,
        "/html_url",
        json!(format!(
            "https://github.com/{repo_full}/actions/runs/{}/job/{job_id}",
            run.id
        )),
    );
    // The labels the job asked for: the dispatch's `runs_on` (a JSON array), when it has one.
    if let Some(labels) = run
        .inputs
        .get("runs_on")
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
    {
        set(j, "/labels", json!(labels));
    }
    v
}

/// The body as GitHub sends it (compact JSON) and its `X-Hub-Signature-256`.
pub fn signed(payload: &Value, secret: &str) -> (Vec<u8>, String) {
    let body = serde_json::to_vec(payload).expect("serialise");
    let signature =
        infradev::service::webhook::sign(&secrecy::SecretString::from(secret.to_owned()), &body);
    (body, signature)
}

/// The `X-Hub-Signature-256` of raw bytes.
pub fn signed_bytes(body: &[u8], secret: &str) -> String {
    infradev::service::webhook::sign(&secrecy::SecretString::from(secret.to_owned()), body)
}
