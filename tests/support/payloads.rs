//! Real webhook payloads from ../shared/fixtures/github/webhooks, re-pointed at the test world
//! (repository, PR number, head SHA, author, installation) and signed for real.

use serde_json::{Value, json};

pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/github/webhooks"
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

/// The body as GitHub sends it (compact JSON) and its `X-Hub-Signature-256`.
pub fn signed(payload: &Value, secret: &str) -> (Vec<u8>, String) {
    let body = serde_json::to_vec(payload).expect("serialise");
    let signature = infradev::webhook::sign(&secrecy::SecretString::from(secret.to_owned()), &body);
    (body, signature)
}

/// The `X-Hub-Signature-256` of raw bytes.
pub fn signed_bytes(body: &[u8], secret: &str) -> String {
    infradev::webhook::sign(&secrecy::SecretString::from(secret.to_owned()), body)
}
