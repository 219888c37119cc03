//! One request through the fake: match it to an operation of the API description, validate it,
//! maybe inject a failure, authenticate it, apply it to the world, validate the answer.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use http::{HeaderMap, Method};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rand::Rng;
use rand::distributions::Alphanumeric;
use serde_json::{Value, json};

use super::respond::{self, error, ts, validation_failed};
use super::spec::{Matched, spec};
use super::world::{
    Failure, FakeCheckRun, FakeComment, FakeDelivery, FakeWorkflowRun, RecordedRequest, World,
};

/// What the fake sends back.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Answer {
    fn new(status: u16, body: Value) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body,
        }
    }

    fn header(mut self, name: &str, value: impl ToString) -> Answer {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// A webhook to send once the world is unlocked (a redelivery to the configured target).
pub struct Outgoing {
    pub delivery_id: u64,
    pub url: String,
    pub secret: String,
    pub event: String,
    pub guid: String,
    pub payload: Value,
}

/// The parts of an HTTP request the fake looks at.
pub struct Incoming<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

pub fn handle(world: &mut World, base_url: &str, req: &Incoming<'_>) -> (Answer, Option<Outgoing>) {
    let segments: Vec<String> = req
        .path
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let decoded_path = format!("/{}", segments.join("/"));
    let query: Vec<(String, String)> = req
        .query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect();
    let body_json: Option<Value> = serde_json::from_slice(req.body).ok();
    let mut record = RecordedRequest {
        method: req.method.clone(),
        path: req.path.to_string(),
        query: req.query.to_string(),
        operation: "?".into(),
        body: body_json.clone(),
        status: 0,
        caller: "none".into(),
        received_at: std::time::Instant::now(),
    };
    let what = format!("{} {}", req.method, req.path);

    let (answer, outgoing) = match spec().find(req.method, &segments) {
        None => {
            world.violations.push(format!(
                "{what}: no operation in the API description matches"
            ));
            (Answer::new(404, error("Not Found", 404)), None)
        }
        Some(m) => {
            record.operation = m.op.id.clone();
            let problems = spec().check_request(&m, &query, req.headers, req.body);
            for p in &problems {
                world.violations.push(format!("{what} ({}): {p}", m.op.id));
            }
            let q: HashMap<&str, &str> = query
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let (answer, outgoing) =
                if let Some(failure) = world.take_failure(req.method, &decoded_path) {
                    (failure_answer(&failure), None)
                } else if !problems.is_empty() {
                    (Answer::new(422, validation_failed(&problems)), None)
                } else {
                    match authenticate(world, &m, req.headers) {
                        Err(answer) => (answer, None),
                        Ok(caller) => {
                            record.caller = caller;
                            let ctx = Ctx {
                                m: &m,
                                q: &q,
                                body: body_json.as_ref().unwrap_or(&Value::Null),
                                base_url,
                                path: &decoded_path,
                                caller: &record.caller,
                            };
                            dispatch(world, &ctx)
                        }
                    }
                };
            for v in spec().check_response(m.op, answer.status, &answer.body) {
                world.violations.push(format!("{what}: {v}"));
            }
            (answer, outgoing)
        }
    };
    let answer = with_rate_limit(world, answer);
    record.status = answer.status;
    world.requests.push(record);
    (answer, outgoing)
}

struct Ctx<'a> {
    m: &'a Matched<'a>,
    q: &'a HashMap<&'a str, &'a str>,
    body: &'a Value,
    base_url: &'a str,
    path: &'a str,
    /// `jwt` or `installation:<id>`.
    caller: &'a str,
}

impl Ctx<'_> {
    fn param(&self, name: &str) -> &str {
        self.m.params.get(name).map(String::as_str).unwrap_or("")
    }

    fn id(&self, name: &str) -> u64 {
        self.param(name).parse().unwrap_or(0)
    }

    fn repo_key(&self) -> String {
        format!("{}/{}", self.param("owner"), self.param("repo")).to_ascii_lowercase()
    }

    fn page(&self) -> (usize, usize) {
        let per_page = self
            .q
            .get("per_page")
            .and_then(|v| v.parse().ok())
            .unwrap_or(30usize);
        let page = self
            .q
            .get("page")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1usize);
        (page.max(1), per_page.clamp(1, 100))
    }

    /// The `Link` header for page-numbered lists.
    fn page_link(&self, page: usize, per_page: usize, total: usize) -> Option<String> {
        let last = total.div_ceil(per_page).max(1);
        if page >= last {
            return None;
        }
        let url = |p: usize| {
            let mut pairs: Vec<String> = self
                .q
                .iter()
                .filter(|(k, _)| **k != "page")
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect();
            pairs.sort();
            pairs.push(format!("page={p}"));
            format!("<{}{}?{}>", self.base_url, self.path, pairs.join("&"))
        };
        Some(format!(
            r#"{}; rel="next", {}; rel="last""#,
            url(page + 1),
            url(last)
        ))
    }
}

fn paginate<T: Clone>(items: &[T], page: usize, per_page: usize) -> Vec<T> {
    items
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .cloned()
        .collect()
}

fn dispatch(world: &mut World, ctx: &Ctx<'_>) -> (Answer, Option<Outgoing>) {
    let op = ctx.m.op.id.as_str();
    let answer = match op {
        "apps/create-installation-access-token" => mint_token(world, ctx),
        "apps/list-webhook-deliveries" => list_deliveries(world, ctx),
        "apps/redeliver-webhook-delivery" => return redeliver(world, ctx),
        "apps/get-repo-installation" => {
            let key = ctx.repo_key();
            match world
                .installations
                .iter()
                .find(|(_, i)| i.repos.contains(&key))
            {
                Some((id, _)) => Answer::new(200, respond::installation(world, *id)),
                None => Answer::new(404, error("Not Found", 404)),
            }
        }
        "checks/create" => create_check_run(world, ctx),
        "checks/update" => update_check_run(world, ctx),
        "checks/list-for-ref" => list_check_runs(world, ctx),
        "issues/list-comments" => list_comments(world, ctx),
        "issues/create-comment" => create_comment(world, ctx),
        "issues/update-comment" => update_comment(world, ctx),
        "repos/get-collaborator-permission-level" => {
            let user = ctx.param("username").to_ascii_lowercase();
            let role = world
                .repos
                .get(&ctx.repo_key())
                .and_then(|r| r.permissions.get(&user).cloned());
            match role {
                Some(role) => Answer::new(200, respond::permission(ctx.param("username"), &role)),
                None => Answer::new(404, error("Not Found", 404)),
            }
        }
        "actions/create-workflow-dispatch" => dispatch_workflow(world, ctx),
        "actions/get-workflow-run" => {
            let repo = &world.repos[&ctx.repo_key()];
            let id = ctx.id("run_id");
            match repo.workflow_runs.iter().find(|r| r.id == id) {
                Some(run) => Answer::new(
                    200,
                    respond::workflow_run(&repo.full_name, repo.id, workflow_id(repo, run), run),
                ),
                None => Answer::new(404, error("Not Found", 404)),
            }
        }
        "actions/cancel-workflow-run" => cancel_workflow_run(world, ctx),
        "actions/list-workflow-runs" => list_workflow_runs(world, ctx),
        "pulls/list" => list_pulls(world, ctx),
        "apps/list-repos-accessible-to-installation" => list_installation_repos(world, ctx),
        "reactions/create-for-issue-comment" => create_reaction(world, ctx),
        "pulls/get" => {
            let key = ctx.repo_key();
            let repo = &world.repos[&key];
            match repo.pulls.get(&ctx.id("pull_number")) {
                Some(p) => Answer::new(200, respond::pull(&repo.full_name, repo.id, p)),
                None => Answer::new(404, error("Not Found", 404)),
            }
        }
        other => {
            world.violations.push(format!(
                "the fake does not implement {other} (add it to tests/support/fake_github)"
            ));
            Answer::new(501, error("not implemented by the fake", 501))
        }
    };
    (answer, None)
}

fn mint_token(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let id = ctx.id("installation_id");
    let ttl = world.token_ttl;
    let Some(inst) = world.installations.get_mut(&id) else {
        return Answer::new(404, error("Not Found", 404));
    };
    let token: String = format!(
        "ghs_{}",
        rand::thread_rng()
            .sample_iter(&Alphanumeric)
            .take(36)
            .map(char::from)
            .collect::<String>()
    );
    let expires_at = Utc::now() + ttl;
    inst.tokens.push((token.clone(), expires_at));
    inst.minted += 1;
    Answer::new(201, respond::installation_token(&token, expires_at))
}

fn list_deliveries(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let (_, per_page) = ctx.page();
    let mut all: Vec<&FakeDelivery> = world.deliveries.iter().collect();
    all.sort_by_key(|d| std::cmp::Reverse(d.id));
    let after: Option<u64> = ctx
        .q
        .get("cursor")
        .and_then(|c| c.strip_prefix("v1_"))
        .and_then(|c| c.parse().ok());
    let status = ctx.q.get("status").copied();
    let matching: Vec<&FakeDelivery> = all
        .into_iter()
        .filter(|d| after.is_none_or(|a| d.id < a))
        .filter(|d| match status {
            Some("success") => (200..400).contains(&d.status_code),
            Some("failure") => (400..600).contains(&d.status_code),
            _ => true,
        })
        .collect();
    let page: Vec<Value> = matching
        .iter()
        .take(per_page)
        .map(|d| respond::delivery(d))
        .collect();
    let mut answer = Answer::new(200, Value::Array(page));
    if matching.len() > per_page {
        let last = matching[per_page - 1].id;
        let mut next = format!(
            "{}/app/hook/deliveries?per_page={per_page}&cursor=v1_{last}",
            ctx.base_url
        );
        if let Some(s) = status {
            next.push_str(&format!("&status={s}"));
        }
        answer = answer.header("link", format!(r#"<{next}>; rel="next""#));
    }
    answer
}

fn redeliver(world: &mut World, ctx: &Ctx<'_>) -> (Answer, Option<Outgoing>) {
    let id = ctx.id("delivery_id");
    let Some(original) = world.deliveries.iter_mut().find(|d| d.id == id) else {
        return (Answer::new(404, error("Not Found", 404)), None);
    };
    original.redelivery_requests += 1;
    let mut again = original.clone();
    let new_id = world.id();
    again.id = new_id;
    again.redelivery = true;
    again.redelivery_requests = 0;
    again.delivered_at = Utc::now();
    again.status_code = world.redelivery_status_code;
    again.status = respond::delivery_status(again.status_code);
    let outgoing = match (&world.webhook_target, &again.payload) {
        (Some(target), Some(payload)) => Some(Outgoing {
            delivery_id: new_id,
            url: target.url.clone(),
            secret: target.secret.clone(),
            event: again.event.clone(),
            guid: again.guid.clone(),
            payload: payload.clone(),
        }),
        _ => None,
    };
    world.deliveries.push(again);
    (Answer::new(202, json!({})), outgoing)
}

fn parse_time(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// Apply a create or update body to a run, as GitHub does: a conclusion completes the run,
/// output fields replace, annotations append, actions replace.
fn apply(run: &mut FakeCheckRun, body: &Value) -> Result<(), String> {
    if body.get("completed_at").is_some()
        && body.get("conclusion").is_none()
        && run.conclusion.is_none()
    {
        return Err("conclusion is required when completed_at is given".into());
    }
    for (field, slot) in [("name", &mut run.name)] {
        if let Some(v) = body[field].as_str() {
            *slot = v.to_string();
        }
    }
    if let Some(v) = body.get("external_id") {
        run.external_id = v.as_str().map(str::to_string);
    }
    if let Some(v) = body.get("details_url") {
        run.details_url = v.as_str().map(str::to_string);
    }
    if let Some(t) = parse_time(&body["started_at"]) {
        run.started_at = t;
    }
    if let Some(s) = body["status"].as_str() {
        run.status = s.to_string();
    }
    if let Some(c) = body["conclusion"].as_str() {
        run.conclusion = Some(c.to_string());
        run.status = "completed".into();
    }
    if let Some(t) = parse_time(&body["completed_at"]) {
        run.completed_at = Some(t);
    }
    if run.status == "completed" && run.completed_at.is_none() {
        run.completed_at = Some(Utc::now());
    }
    if let Some(output) = body.get("output").filter(|o| o.is_object()) {
        if let Some(t) = output["title"].as_str() {
            run.title = Some(t.to_string());
        }
        if let Some(s) = output["summary"].as_str() {
            run.summary = Some(s.to_string());
        }
        if let Some(t) = output["text"].as_str() {
            run.text = Some(t.to_string());
        }
        if let Some(list) = output["annotations"].as_array() {
            run.annotations.extend(list.iter().cloned());
        }
    }
    if let Some(actions) = body["actions"].as_array() {
        run.actions = actions.clone();
    }
    run.history.push(body.clone());
    Ok(())
}

fn create_check_run(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let id = world.id();
    let mut run = FakeCheckRun {
        id,
        app_id: world.app_id,
        head_sha: ctx.body["head_sha"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        name: String::new(),
        external_id: None,
        details_url: None,
        status: "queued".into(),
        conclusion: None,
        started_at: Utc::now(),
        completed_at: None,
        title: None,
        summary: None,
        text: None,
        annotations: Vec::new(),
        actions: Vec::new(),
        history: Vec::new(),
    };
    if let Err(e) = apply(&mut run, ctx.body) {
        world.violations.push(format!("POST {}: {e}", ctx.path));
        return Answer::new(422, validation_failed(&[e]));
    }
    let key = ctx.repo_key();
    let body = respond::check_run(world, &world.repos[&key].full_name, &run);
    world
        .repos
        .get_mut(&key)
        .expect("authenticated repo")
        .check_runs
        .push(run);
    Answer::new(201, body)
}

fn update_check_run(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let key = ctx.repo_key();
    let id = ctx.id("check_run_id");
    let repo = world.repos.get_mut(&key).expect("authenticated repo");
    let Some(run) = repo.check_runs.iter_mut().find(|r| r.id == id) else {
        return Answer::new(404, error("Not Found", 404));
    };
    if let Err(e) = apply(run, ctx.body) {
        world.violations.push(format!("PATCH {}: {e}", ctx.path));
        return Answer::new(422, validation_failed(&[e]));
    }
    let run = run.clone();
    let full_name = repo.full_name.clone();
    Answer::new(200, respond::check_run(world, &full_name, &run))
}

fn list_check_runs(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let repo = &world.repos[&ctx.repo_key()];
    let git_ref = ctx.param("ref");
    let mut runs: Vec<&FakeCheckRun> = repo
        .check_runs
        .iter()
        .filter(|r| r.head_sha == git_ref)
        .filter(|r| ctx.q.get("check_name").is_none_or(|n| r.name == *n))
        .filter(|r| ctx.q.get("status").is_none_or(|s| r.status == *s))
        .filter(|r| {
            ctx.q
                .get("app_id")
                .is_none_or(|a| r.app_id.to_string() == *a)
        })
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.id));
    if ctx.q.get("filter").is_none_or(|f| *f == "latest") {
        let mut names = Vec::new();
        runs.retain(|r| {
            let fresh = !names.contains(&r.name);
            names.push(r.name.clone());
            fresh
        });
    }
    let (page, per_page) = ctx.page();
    let total = runs.len();
    let items: Vec<Value> = paginate(&runs, page, per_page)
        .into_iter()
        .map(|r| respond::check_run(world, &repo.full_name, r))
        .collect();
    let mut answer = Answer::new(200, json!({"total_count": total, "check_runs": items}));
    if let Some(link) = ctx.page_link(page, per_page, total) {
        answer = answer.header("link", link);
    }
    answer
}

fn list_comments(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let repo = &world.repos[&ctx.repo_key()];
    let issue = ctx.id("issue_number");
    let since = ctx.q.get("since").and_then(|s| parse_time(&json!(s)));
    let comments: Vec<&FakeComment> = repo
        .comments
        .iter()
        .filter(|c| c.issue == issue)
        .filter(|c| since.is_none_or(|s| c.updated_at >= s))
        .collect();
    let (page, per_page) = ctx.page();
    let items: Vec<Value> = paginate(&comments, page, per_page)
        .into_iter()
        .map(|c| respond::comment(world, &repo.full_name, c))
        .collect();
    let mut answer = Answer::new(200, Value::Array(items));
    if let Some(link) = ctx.page_link(page, per_page, comments.len()) {
        answer = answer.header("link", link);
    }
    answer
}

/// `GET /repos/{o}/{r}/pulls`: `state` open (the default), closed or all; by number, newest
/// first (GitHub's default sort, `created` descending).
fn list_pulls(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let repo = &world.repos[&ctx.repo_key()];
    let state = ctx.q.get("state").copied().unwrap_or("open");
    let pulls: Vec<&super::world::FakePull> = repo
        .pulls
        .values()
        .rev()
        .filter(|p| match state {
            "open" => p.state_open,
            "closed" => !p.state_open,
            _ => true,
        })
        .collect();
    let (page, per_page) = ctx.page();
    let items: Vec<Value> = paginate(&pulls, page, per_page)
        .into_iter()
        .map(|p| respond::pull_simple(&repo.full_name, repo.id, p))
        .collect();
    let mut answer = Answer::new(200, Value::Array(items));
    if let Some(link) = ctx.page_link(page, per_page, pulls.len()) {
        answer = answer.header("link", link);
    }
    answer
}

/// `GET /installation/repositories`: the repositories of the calling token's installation.
fn list_installation_repos(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let id: u64 = ctx
        .caller
        .strip_prefix("installation:")
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    let keys = world
        .installations
        .get(&id)
        .map(|i| i.repos.clone())
        .unwrap_or_default();
    let repos: Vec<Value> = keys
        .iter()
        .filter_map(|k| world.repos.get(k))
        .map(|r| respond::repository(&r.full_name, r.id))
        .collect();
    let (page, per_page) = ctx.page();
    let items = paginate(&repos, page, per_page);
    let mut answer = Answer::new(
        200,
        json!({"total_count": repos.len(), "repositories": items, "repository_selection": "selected"}),
    );
    if let Some(link) = ctx.page_link(page, per_page, repos.len()) {
        answer = answer.header("link", link);
    }
    answer
}

/// `POST /repos/{o}/{r}/issues/comments/{id}/reactions`: 201 for a new reaction, 200 when the
/// caller already reacted so.
fn create_reaction(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let content = ctx.body["content"].as_str().unwrap_or_default().to_string();
    let who = world.bot_login();
    let id = world.id();
    let key = ctx.repo_key();
    let comment_id = ctx.id("comment_id");
    let repo = world.repos.get_mut(&key).expect("authenticated repo");
    let Some(c) = repo.comments.iter_mut().find(|c| c.id == comment_id) else {
        return Answer::new(404, error("Not Found", 404));
    };
    let status = if c.reactions.iter().any(|(w, r)| *w == who && *r == content) {
        200
    } else {
        c.reactions.push((who.clone(), content.clone()));
        201
    };
    Answer::new(status, respond::reaction(id, &who, &content))
}

/// GitHub's 422 for an over-long comment (real behaviour, not a violation).
fn body_too_long(body: &str) -> Option<Answer> {
    (body.chars().count() > 65_536).then(|| {
        Answer::new(
            422,
            json!({
                "message": "Validation Failed",
                "documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment",
                "errors": [{"resource": "IssueComment", "code": "custom", "field": "body",
                            "message": "body is too long (maximum is 65536 characters)"}],
            }),
        )
    })
}

fn create_comment(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let body = ctx.body["body"].as_str().unwrap_or_default().to_string();
    if let Some(answer) = body_too_long(&body) {
        return answer;
    }
    let now = Utc::now();
    let comment = FakeComment {
        id: world.id(),
        issue: ctx.id("issue_number"),
        body,
        author: world.bot_login(),
        by_app: true,
        edits: Vec::new(),
        created_at: now,
        updated_at: now,
        reactions: Vec::new(),
    };
    let key = ctx.repo_key();
    let full_name = world.repos[&key].full_name.clone();
    let json = respond::comment(world, &full_name, &comment);
    world
        .repos
        .get_mut(&key)
        .expect("authenticated repo")
        .comments
        .push(comment);
    let location = json["url"].as_str().unwrap_or_default().to_string();
    Answer::new(201, json).header("location", location)
}

fn update_comment(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let body = ctx.body["body"].as_str().unwrap_or_default().to_string();
    if let Some(answer) = body_too_long(&body) {
        return answer;
    }
    let key = ctx.repo_key();
    let id = ctx.id("comment_id");
    let repo = world.repos.get_mut(&key).expect("authenticated repo");
    let Some(c) = repo.comments.iter_mut().find(|c| c.id == id) else {
        return Answer::new(404, error("Not Found", 404));
    };
    let old = std::mem::replace(&mut c.body, body);
    c.edits.push(old);
    c.updated_at = Utc::now();
    let c = c.clone();
    let full_name = repo.full_name.clone();
    Answer::new(200, respond::comment(world, &full_name, &c))
}

/// The id of the registered workflow a run belongs to (0 if it was unregistered since).
fn workflow_id(repo: &super::world::RepoState, run: &FakeWorkflowRun) -> u64 {
    repo.workflows
        .iter()
        .find(|w| w.file == run.workflow)
        .map_or(0, |w| w.id)
}

/// `POST …/actions/workflows/{workflow_id}/dispatches`, as GitHub: the workflow (file name or
/// id) must exist (404), the ref must be given (422), input values must be strings and declared
/// by the workflow (422). The run is queued at once, named after its `name` input (the grading
/// workflow's `run-name`).
fn dispatch_workflow(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let key = ctx.repo_key();
    let wanted = ctx.param("workflow_id").to_string();
    let Some(workflow) = world.repos[&key]
        .workflows
        .iter()
        .find(|w| w.file == wanted || w.id.to_string() == wanted)
        .cloned()
    else {
        return Answer::new(404, error("Not Found", 404));
    };
    let git_ref = ctx.body["ref"].as_str().unwrap_or_default().to_string();
    let inputs = ctx.body["inputs"].as_object().cloned().unwrap_or_default();
    let mut problems = Vec::new();
    if git_ref.is_empty() {
        problems.push("No ref found for: \"\" (a branch or tag is required)".to_string());
    }
    for (name, value) in &inputs {
        if !value.is_string() {
            problems.push(format!(
                "Invalid request.\n\nFor 'properties/{name}', {value} is not a string."
            ));
        }
    }
    if let Some(declared) = &workflow.inputs {
        let unexpected: Vec<&String> = inputs.keys().filter(|k| !declared.contains(k)).collect();
        if !unexpected.is_empty() {
            problems.push(format!("Unexpected inputs provided: {unexpected:?}"));
        }
    }
    if !problems.is_empty() {
        world.violations.push(format!(
            "POST {}: GitHub rejects this dispatch: {}",
            ctx.path,
            problems.join("; ")
        ));
        return Answer::new(422, error(&problems.join("; "), 422));
    }
    let id = world.id();
    let display_title = inputs
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(&workflow.file)
        .to_string();
    let run = FakeWorkflowRun {
        id,
        workflow: workflow.file.clone(),
        git_ref,
        inputs,
        status: "queued".into(),
        conclusion: None,
        display_title,
        run_attempt: 1,
        cancel_requested: false,
    };
    let repo = world.repos.get_mut(&key).expect("authenticated repo");
    let full_name = repo.full_name.clone();
    repo.workflow_runs.push(run);
    if ctx.body["return_run_details"].as_bool() == Some(true) {
        Answer::new(200, respond::workflow_dispatch(&full_name, id))
    } else {
        Answer::new(204, Value::Null)
    }
}

/// `POST …/actions/runs/{run_id}/cancel`: 202 and the run ends `cancelled` (GitHub takes a
/// moment; the fake is instant), or GitHub's 409 for a run that already completed.
fn cancel_workflow_run(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let id = ctx.id("run_id");
    let repo = world
        .repos
        .get_mut(&ctx.repo_key())
        .expect("authenticated repo");
    let Some(run) = repo.workflow_runs.iter_mut().find(|r| r.id == id) else {
        return Answer::new(404, error("Not Found", 404));
    };
    if run.status == "completed" {
        return Answer::new(
            409,
            error("Cannot cancel a workflow run that is completed.", 409),
        );
    }
    run.cancel_requested = true;
    run.status = "completed".into();
    run.conclusion = Some("cancelled".into());
    Answer::new(202, json!({}))
}

/// `GET …/actions/workflows/{workflow_id}/runs`: the workflow's runs, newest first, filtered
/// by `event` (every fake run is a `workflow_dispatch`) and `status` (a status or a
/// conclusion, as GitHub matches it), page-numbered.
fn list_workflow_runs(world: &mut World, ctx: &Ctx<'_>) -> Answer {
    let repo = &world.repos[&ctx.repo_key()];
    let wanted = ctx.param("workflow_id");
    let Some(workflow) = repo
        .workflows
        .iter()
        .find(|w| w.file == wanted || w.id.to_string() == wanted)
    else {
        return Answer::new(404, error("Not Found", 404));
    };
    let mut runs: Vec<&FakeWorkflowRun> = repo
        .workflow_runs
        .iter()
        .filter(|r| r.workflow == workflow.file)
        .filter(|_| ctx.q.get("event").is_none_or(|e| *e == "workflow_dispatch"))
        .filter(|r| {
            ctx.q
                .get("status")
                .is_none_or(|s| r.status == *s || r.conclusion.as_deref() == Some(*s))
        })
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.id));
    let (page, per_page) = ctx.page();
    let total = runs.len();
    let items: Vec<Value> = paginate(&runs, page, per_page)
        .into_iter()
        .map(|r| respond::workflow_run(&repo.full_name, repo.id, workflow.id, r))
        .collect();
    let mut answer = Answer::new(200, json!({"total_count": total, "workflow_runs": items}));
    if let Some(link) = ctx.page_link(page, per_page, total) {
        answer = answer.header("link", link);
    }
    answer
}

fn failure_answer(failure: &Failure) -> Answer {
    let now = Utc::now().timestamp();
    match failure {
        Failure::ServerError => Answer::new(500, json!({"message": "Server Error"})),
        Failure::RateLimited { retry_after_s } => Answer::new(
            429,
            error("You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", 429),
        )
        .header("retry-after", retry_after_s),
        Failure::SecondaryRateLimit => Answer::new(
            403,
            error(
                "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. \
                 If you reach out to GitHub Support for help, please include the request ID 0000:0000:0000000:0000000:00000000.",
                403,
            ),
        ),
        Failure::PrimaryExhausted { reset_in_s } => Answer::new(
            403,
            error("API rate limit exceeded for installation ID 1.", 403),
        )
        .header("x-ratelimit-limit", 5000)
        .header("x-ratelimit-remaining", 0)
        .header("x-ratelimit-used", 5000)
        .header("x-ratelimit-reset", now + *reset_in_s as i64)
        .header("x-ratelimit-resource", "core"),
        Failure::Status { status, message } => Answer::new(*status, error(message, *status)),
    }
}

fn with_rate_limit(world: &mut World, answer: Answer) -> Answer {
    if answer
        .headers
        .iter()
        .any(|(k, _)| k == "x-ratelimit-remaining")
    {
        return answer;
    }
    world.rate_remaining = world.rate_remaining.saturating_sub(1).max(1);
    let remaining = world.rate_remaining;
    answer
        .header("x-ratelimit-limit", 5000)
        .header("x-ratelimit-remaining", remaining)
        .header("x-ratelimit-used", 5000 - remaining)
        .header("x-ratelimit-reset", Utc::now().timestamp() + 3600)
        .header("x-ratelimit-resource", "core")
}

/// Who is calling: the App (JWT) on `/app` endpoints and the repo-installation lookup, an
/// installation (token covering the repository) everywhere else.
fn authenticate(world: &mut World, m: &Matched<'_>, headers: &HeaderMap) -> Result<String, Answer> {
    let auth = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let unauthorized = |message: &str| Answer::new(401, error(message, 401));
    let wants_jwt = m.op.template.starts_with("/app/") || m.op.id == "apps/get-repo-installation";
    if wants_jwt {
        let Some(jwt) = auth.strip_prefix("Bearer ") else {
            world.violations.push(format!(
                "{}: the App JWT must be sent as `Authorization: Bearer`",
                m.op.id
            ));
            return Err(unauthorized("A JSON web token could not be decoded"));
        };
        return match verify_jwt(world, jwt) {
            Ok(()) => Ok("jwt".into()),
            Err(e) => {
                world
                    .violations
                    .push(format!("{}: JWT rejected: {e}", m.op.id));
                Err(unauthorized(&e))
            }
        };
    }
    let token = auth
        .strip_prefix("token ")
        .or_else(|| auth.strip_prefix("Bearer "))
        .unwrap_or("");
    if token.matches('.').count() == 2 {
        world.violations.push(format!(
            "{}: an App JWT was sent where an installation token is needed",
            m.op.id
        ));
        return Err(unauthorized("Bad credentials"));
    }
    let now = Utc::now();
    let found = world.installations.iter().find_map(|(id, inst)| {
        inst.tokens
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, exp)| (*id, *exp, inst.repos.clone()))
    });
    let Some((id, expires_at, repos)) = found else {
        // Unknown or revoked: GitHub says 401, and so do we (not a protocol violation).
        return Err(unauthorized("Bad credentials"));
    };
    if expires_at <= now {
        world.violations.push(format!(
            "{}: installation token used after it expired at {}",
            m.op.id,
            ts(expires_at)
        ));
        return Err(unauthorized("Bad credentials"));
    }
    // Operations on a repository need a token that covers it; the installation's own
    // (`/installation/repositories`) need only a live token.
    let Some(owner) = m.params.get("owner") else {
        return Ok(format!("installation:{id}"));
    };
    let key = format!(
        "{owner}/{}",
        m.params.get("repo").map(String::as_str).unwrap_or("")
    )
    .to_ascii_lowercase();
    if !repos.contains(&key) {
        world.violations.push(format!(
            "{}: installation {id} does not cover {key}",
            m.op.id
        ));
        return Err(Answer::new(404, error("Not Found", 404)));
    }
    Ok(format!("installation:{id}"))
}

fn verify_jwt(world: &World, jwt: &str) -> Result<(), String> {
    let key =
        DecodingKey::from_rsa_pem(world.public_key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.leeway = 0;
    validation.validate_aud = false;
    // `iss` may be a number (the App id) or a string (id or client id): checked below, since
    // jsonwebtoken only understands string issuers.
    validation.set_required_spec_claims(&["exp"]);
    let data = jsonwebtoken::decode::<Value>(jwt, &key, &validation)
        .map_err(|e| format!("A JSON web token could not be decoded ({e})"))?;
    let claims = data.claims;
    let now = Utc::now().timestamp();
    let iat = claims["iat"]
        .as_i64()
        .ok_or("'Issued at' claim ('iat') must be an Integer")?;
    let exp = claims["exp"]
        .as_i64()
        .ok_or("'Expiration time' claim ('exp') must be an Integer")?;
    if iat > now {
        return Err(
            "'Issued at' claim ('iat') must be an Integer representing a time in the past".into(),
        );
    }
    if exp - iat > 600 {
        return Err("'Expiration time' claim ('exp') is too far in the future".into());
    }
    let iss = match &claims["iss"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("'Issuer' claim ('iss') is {other}")),
    };
    if iss != world.app_id.to_string() {
        return Err(format!(
            "'Issuer' claim ('iss') {iss} is not App {}",
            world.app_id
        ));
    }
    Ok(())
}

fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (
                (bytes[i + 1] as char).to_digit(16),
                (bytes[i + 2] as char).to_digit(16),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
