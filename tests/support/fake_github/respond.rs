//! Answers in GitHub's shapes: each starts from the API description's own example of that
//! object and overlays the fake's state, and is checked against the response schema before it
//! is sent.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::spec::spec;
use super::world::{
    FakeCheckRun, FakeComment, FakeDelivery, FakePull, FakeWorkflowRun, HeadRepo, World,
};

const WEB: &str = "https://github.com";
const API: &str = "https://api.github.com";

pub fn ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// GitHub's error body.
pub fn error(message: &str, status: u16) -> Value {
    json!({
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": status.to_string(),
    })
}

/// A 422 body with GitHub's `errors` list.
pub fn validation_failed(errors: &[String]) -> Value {
    json!({
        "message": "Validation Failed",
        "documentation_url": "https://docs.github.com/rest",
        "errors": errors.iter().map(|e| json!({"resource": "Request", "code": "custom", "message": e})).collect::<Vec<_>>(),
    })
}

fn user_id(login: &str) -> u64 {
    // Stable, distinct ids per login.
    login
        .bytes()
        .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
        % 100_000_000
        + 1
}

/// A simple-user object.
pub fn user(login: &str, is_bot: bool) -> Value {
    let mut u = spec().example("pull-request")["user"].clone();
    u["login"] = json!(login);
    u["id"] = json!(user_id(login));
    u["type"] = json!(if is_bot { "Bot" } else { "User" });
    let escaped = login.replace('[', "%5B").replace(']', "%5D");
    u["url"] = json!(format!("{API}/users/{escaped}"));
    u["html_url"] = json!(match login.strip_suffix("[bot]") {
        Some(slug) => format!("{WEB}/apps/{slug}"),
        None => format!("{WEB}/{login}"),
    });
    u
}

/// The App as an integration object.
pub fn integration(world: &World) -> Value {
    let mut app = spec().example("check-run")["app"].clone();
    app["id"] = json!(world.app_id);
    app["slug"] = json!(world.app_slug);
    app["name"] = json!(world.app_slug);
    app["html_url"] = json!(format!("{WEB}/apps/{}", world.app_slug));
    app
}

/// A full repository object.
pub fn repository(full_name: &str, id: u64) -> Value {
    let (owner, name) = full_name.split_once('/').unwrap_or(("octocat", full_name));
    let mut r = spec().example("pull-request")["head"]["repo"].clone();
    r["id"] = json!(id);
    r["name"] = json!(name);
    r["full_name"] = json!(full_name);
    r["owner"] = user(owner, false);
    r["html_url"] = json!(format!("{WEB}/{full_name}"));
    r["url"] = json!(format!("{API}/repos/{full_name}"));
    r["clone_url"] = json!(format!("{WEB}/{full_name}.git"));
    r["git_url"] = json!(format!("git://github.com/{full_name}.git"));
    r["ssh_url"] = json!(format!("git@github.com:{full_name}.git"));
    r["svn_url"] = json!(format!("{WEB}/{full_name}"));
    r
}

pub fn installation_token(token: &str, expires_at: DateTime<Utc>) -> Value {
    let mut t = spec().example("installation-token");
    t["token"] = json!(token);
    t["expires_at"] = json!(ts(expires_at));
    t["permissions"] = json!({"checks": "write", "issues": "write", "pull_requests": "read", "contents": "read", "metadata": "read"});
    if let Some(obj) = t.as_object_mut() {
        obj.remove("repositories");
    }
    t
}

pub fn installation(world: &World, id: u64) -> Value {
    let mut i = spec().example("installation");
    i["id"] = json!(id);
    i["app_id"] = json!(world.app_id);
    i["app_slug"] = json!(world.app_slug);
    i["access_tokens_url"] = json!(format!("{API}/app/installations/{id}/access_tokens"));
    i
}

pub fn check_run(world: &World, full_name: &str, run: &FakeCheckRun) -> Value {
    let mut c = spec().example("check-run");
    c["id"] = json!(run.id);
    c["node_id"] = json!(format!("CR_{}", run.id));
    c["head_sha"] = json!(run.head_sha);
    c["name"] = json!(run.name);
    c["external_id"] = json!(run.external_id);
    c["details_url"] = json!(run.details_url);
    c["url"] = json!(format!("{API}/repos/{full_name}/check-runs/{}", run.id));
    c["html_url"] = json!(format!("{WEB}/{full_name}/runs/{}", run.id));
    c["status"] = json!(run.status);
    c["conclusion"] = json!(run.conclusion);
    c["started_at"] = json!(ts(run.started_at));
    c["completed_at"] = json!(run.completed_at.map(ts));
    c["output"] = json!({
        "title": run.title,
        "summary": run.summary,
        "text": run.text,
        "annotations_count": run.annotations.len(),
        "annotations_url": format!("{API}/repos/{full_name}/check-runs/{}/annotations", run.id),
    });
    c["check_suite"] = json!({"id": run.id + 1_000_000});
    c["app"] = if run.app_id == world.app_id {
        integration(world)
    } else {
        let mut other = integration(world);
        other["id"] = json!(run.app_id);
        other["slug"] = json!("other-app");
        other
    };
    c["pull_requests"] = json!([]);
    c
}

pub fn comment(world: &World, full_name: &str, c: &FakeComment) -> Value {
    let mut v = spec().example("issue-comment");
    v["id"] = json!(c.id);
    v["node_id"] = json!(format!("IC_{}", c.id));
    v["url"] = json!(format!("{API}/repos/{full_name}/issues/comments/{}", c.id));
    v["html_url"] = json!(format!(
        "{WEB}/{full_name}/issues/{}#issuecomment-{}",
        c.issue, c.id
    ));
    v["issue_url"] = json!(format!("{API}/repos/{full_name}/issues/{}", c.issue));
    v["body"] = json!(c.body);
    v["user"] = user(&c.author, c.by_app);
    v["created_at"] = json!(ts(c.created_at));
    v["updated_at"] = json!(ts(c.updated_at));
    v["author_association"] = json!(if c.by_app { "NONE" } else { "CONTRIBUTOR" });
    v["performed_via_github_app"] = if c.by_app {
        integration(world)
    } else {
        Value::Null
    };
    v
}

pub fn pull(full_name: &str, repo_id: u64, p: &FakePull) -> Value {
    let mut v = spec().example("pull-request");
    let n = p.number;
    v["id"] = json!(repo_id * 10_000 + n);
    v["number"] = json!(n);
    v["url"] = json!(format!("{API}/repos/{full_name}/pulls/{n}"));
    v["html_url"] = json!(format!("{WEB}/{full_name}/pull/{n}"));
    v["state"] = json!(if p.state_open { "open" } else { "closed" });
    v["draft"] = json!(p.draft);
    v["body"] = json!(p.body);
    v["user"] = user(&p.author, p.author_is_bot);
    v["labels"] = Value::Array(
        p.labels
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut l = spec().example("pull-request")["labels"][0].clone();
                l["id"] = json!(i as u64 + 1);
                l["name"] = json!(name);
                l["url"] = json!(format!("{API}/repos/{full_name}/labels/{name}"));
                l
            })
            .collect(),
    );
    v["requested_teams"] = json!([]);
    v["merged"] = json!(false);
    v["merged_at"] = Value::Null;
    v["closed_at"] = Value::Null;
    let (owner, _) = full_name.split_once('/').unwrap_or((full_name, ""));

    v["head"]["ref"] = json!(p.head_ref);
    v["head"]["sha"] = json!(p.head_sha);
    v["head"]["label"] = json!(format!("{}:{}", p.author, p.head_ref));
    v["head"]["user"] = user(&p.author, p.author_is_bot);
    v["head"]["repo"] = match &p.head_repo {
        HeadRepo::Same => repository(full_name, repo_id),
        HeadRepo::Fork(name) => repository(name, repo_id + 7),
    };
    v["base"]["ref"] = json!(p.base_ref);
    v["base"]["label"] = json!(format!("{owner}:{}", p.base_ref));
    v["base"]["user"] = user(owner, false);
    v["base"]["repo"] = repository(full_name, repo_id);
    v
}

/// A pull request as `GET …/pulls` lists it (`pull-request-simple`).
pub fn pull_simple(full_name: &str, repo_id: u64, p: &FakePull) -> Value {
    let full = pull(full_name, repo_id, p);
    let mut v = spec().example("pull-request-simple-items")[0].clone();
    let Value::Object(fields) = &mut v else {
        unreachable!("an object")
    };
    for (k, field) in fields.iter_mut() {
        if let Some(value) = full.get(k) {
            *field = value.clone();
        }
    }
    v
}

/// A reaction by `login` (`reaction`).
pub fn reaction(id: u64, login: &str, content: &str) -> Value {
    let mut v = spec().example("reaction");
    v["id"] = json!(id);
    v["content"] = json!(content);
    v["user"] = user(login, login.ends_with("[bot]"));
    v["created_at"] = json!(ts(Utc::now()));
    v
}

pub fn permission(login: &str, role: &str) -> Value {
    let legacy = match role {
        "admin" => "admin",
        "maintain" | "write" => "write",
        "triage" | "read" => "read",
        _ => "none",
    };
    let mut v =
        spec().example("repository-collaborator-permission-response-if-user-has-admin-permissions");
    let mut u = user(login, false);
    u["role_name"] = json!(role);
    v["permission"] = json!(legacy);
    v["role_name"] = json!(role);
    v["user"] = u;
    v
}

/// A stable 40-hex commit id for a ref (the fake keeps no commits).
fn commit_of(git_ref: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = String::new();
    for round in 0u8..3 {
        for b in git_ref.bytes().chain([round]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out.truncate(40);
    out
}

/// A minimal-repository object (what a workflow run embeds), from the run example's own.
fn minimal_repository(full_name: &str, id: u64) -> Value {
    let (owner, name) = full_name.split_once('/').unwrap_or(("octocat", full_name));
    let mut r = spec().example("workflow-run")["repository"].clone();
    let old_full = r["full_name"].as_str().unwrap_or_default().to_string();
    // Every URL of the example names its repository; point them all at this one.
    if let Some(obj) = r.as_object_mut() {
        for (key, value) in obj.iter_mut() {
            if key.ends_with("url")
                && let Some(text) = value.as_str()
            {
                *value = json!(text.replace(&old_full, full_name));
            }
        }
    }
    r["id"] = json!(id);
    r["node_id"] = json!(format!("R_{id}"));
    r["name"] = json!(name);
    r["full_name"] = json!(full_name);
    r["owner"] = user(owner, false);
    r["private"] = json!(true);
    r
}

/// A workflow run (the `workflow-run` schema, one of the description's largest): the
/// description's complete example with the run's own values over it.
pub fn workflow_run(
    full_name: &str,
    repo_id: u64,
    workflow_id: u64,
    run: &FakeWorkflowRun,
) -> Value {
    let mut v = spec().example("workflow-run");
    let id = run.id;
    let runs = format!("{API}/repos/{full_name}/actions/runs/{id}");
    let sha = commit_of(&run.git_ref);
    let now = ts(Utc::now());
    v["id"] = json!(id);
    v["node_id"] = json!(format!("WFR_{id}"));
    v["name"] = json!(
        run.workflow
            .trim_end_matches(".yml")
            .trim_end_matches(".yaml")
    );
    v["check_suite_id"] = json!(id + 2_000_000);
    v["check_suite_node_id"] = json!(format!("CS_{}", id + 2_000_000));
    v["head_branch"] = json!(run.git_ref);
    v["head_sha"] = json!(sha);
    v["path"] = json!(format!(
        ".github/workflows/{}@{}",
        run.workflow, run.git_ref
    ));
    v["run_number"] = json!(id);
    v["event"] = json!("workflow_dispatch");
    v["display_title"] = json!(run.display_title);
    v["status"] = json!(run.status);
    v["conclusion"] = json!(run.conclusion);
    v["workflow_id"] = json!(workflow_id);
    v["url"] = json!(runs);
    v["html_url"] = json!(format!("{WEB}/{full_name}/actions/runs/{id}"));
    v["pull_requests"] = json!([]);
    v["created_at"] = json!(now);
    v["updated_at"] = json!(now);
    v["run_started_at"] = json!(now);
    v["run_attempt"] = json!(run.run_attempt);
    v["referenced_workflows"] = json!([]);
    // The App dispatched it.
    let bot = format!("{}[bot]", super::APP_SLUG);
    v["actor"] = user(&bot, true);
    v["triggering_actor"] = user(&bot, true);
    v["jobs_url"] = json!(format!("{runs}/jobs"));
    v["logs_url"] = json!(format!("{runs}/logs"));
    v["check_suite_url"] = json!(format!(
        "{API}/repos/{full_name}/check-suites/{}",
        id + 2_000_000
    ));
    v["artifacts_url"] = json!(format!("{runs}/artifacts"));
    v["cancel_url"] = json!(format!("{runs}/cancel"));
    v["rerun_url"] = json!(format!("{runs}/rerun"));
    v["previous_attempt_url"] = if run.run_attempt > 1 {
        json!(format!("{runs}/attempts/{}", run.run_attempt - 1))
    } else {
        Value::Null
    };
    v["workflow_url"] = json!(format!(
        "{API}/repos/{full_name}/actions/workflows/{workflow_id}"
    ));
    v["head_commit"]["id"] = json!(sha);
    v["head_commit"]["message"] = json!(format!("Update {}", run.workflow));
    v["repository"] = minimal_repository(full_name, repo_id);
    v["head_repository"] = minimal_repository(full_name, repo_id);
    v
}

/// The answer to a dispatch with `return_run_details`.
pub fn workflow_dispatch(full_name: &str, run_id: u64) -> Value {
    let mut v = spec().example("workflow-dispatch-response");
    v["workflow_run_id"] = json!(run_id);
    v["run_url"] = json!(format!("{API}/repos/{full_name}/actions/runs/{run_id}"));
    v["html_url"] = json!(format!("{WEB}/{full_name}/actions/runs/{run_id}"));
    v
}

pub fn delivery(d: &FakeDelivery) -> Value {
    let mut v = spec().example("hook-delivery-items")[0].clone();
    v["id"] = json!(d.id);
    v["guid"] = json!(d.guid);
    v["delivered_at"] = json!(ts(d.delivered_at));
    v["redelivery"] = json!(d.redelivery);
    v["status"] = json!(d.status);
    v["status_code"] = json!(d.status_code);
    v["event"] = json!(d.event);
    v["action"] = json!(d.action);
    v["installation_id"] = json!(d.installation_id);
    v["repository_id"] = json!(d.repository_id);
    v["throttled_at"] = Value::Null;
    v
}

/// GitHub's words for a delivery's HTTP outcome.
pub fn delivery_status(code: u16) -> String {
    match code {
        200..=299 => "OK".into(),
        0 => "failed to connect".into(),
        _ => http::StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Invalid HTTP Response")
            .to_string(),
    }
}
