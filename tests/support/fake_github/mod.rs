//! A stateful, in-process github.com for tests. It is the only thing we fake: our own code (the
//! JWT signing, octocrab, axum, HMAC) runs for real against it.
//!
//! Every request is checked against GitHub's OpenAPI description (operation, path and query
//! parameters, JSON body, `X-GitHub-Api-Version`, one `User-Agent`) and against GitHub's
//! authentication rules (an RS256 App JWT with `exp - iat <= 600` on `/app` endpoints, a live
//! installation token covering the repository elsewhere). Anything wrong is recorded as a
//! violation; tests end with [`FakeGitHub::assert_no_violations`]. The fake's own answers are
//! built from the description's examples and validated against its response schemas too.

mod handle;
mod keys;
mod respond;
mod spec;
mod world;

use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use chrono::{Duration, Utc};
use hmac::{Hmac, Mac};
use http::Method;
use secrecy::SecretString;
use serde_json::Value;
use sha2::Sha256;

#[allow(unused_imports)]
pub use keys::{TestKey, app_key};
#[allow(unused_imports)]
pub use spec::{API_VERSION, SPEC_PATH};
#[allow(unused_imports)]
pub use world::{
    Failure, FakeCheckRun, FakeComment, FakeDelivery, FakePull, FakeWorkflowRun, HeadRepo,
    NewDelivery, RecordedRequest,
};

use handle::{Incoming, Outgoing};
use world::{FailureRule, FakeWorkflow, Installation, WebhookTarget, World};

/// The test App's id and slug (its bot user is `infradev-test[bot]`).
pub const APP_ID: u64 = 4242;
pub const APP_SLUG: &str = "infradev-test";

struct Shared {
    world: Mutex<World>,
    url: String,
}

/// A running fake github.com on `127.0.0.1:<port>`. Stops when dropped.
pub struct FakeGitHub {
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for FakeGitHub {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl FakeGitHub {
    /// Start a fake with App [`APP_ID`] whose public key is [`app_key`]'s.
    pub async fn start() -> FakeGitHub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake GitHub");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let shared = Arc::new(Shared {
            world: Mutex::new(World::new(APP_ID, APP_SLUG, &app_key().public_pem)),
            url,
        });
        // Parse the description before the first request (it is shared by the process).
        spec::spec();
        let app = Router::new().fallback(serve).with_state(shared.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .expect("the fake GitHub server");
        });
        FakeGitHub {
            shared,
            shutdown: Some(tx),
        }
    }

    /// The API base URL (`http://127.0.0.1:<port>`), what `api_url` is set to.
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    pub fn app_id(&self) -> u64 {
        APP_ID
    }

    /// The App's bot login, the author of its comments.
    pub fn bot_login(&self) -> String {
        self.world().bot_login()
    }

    /// The App's private key (PKCS#1 PEM).
    pub fn private_key_pem(&self) -> SecretString {
        SecretString::from(app_key().private_pem.clone())
    }

    /// Our real GitHub client, pointed at this fake.
    pub fn app(&self) -> infradev::service::github::GitHubApp {
        infradev::service::github::GitHubApp::new(&self.url(), APP_ID, &self.private_key_pem())
            .expect("GitHubApp against the fake")
    }

    // ---- seeding -------------------------------------------------------------------------

    /// An installation of the App covering `repos` (full names; created if new).
    pub fn add_installation(&self, id: u64, repos: &[&str]) {
        let mut w = self.world();
        for r in repos {
            w.repo_mut(r);
        }
        let inst = w.installations.entry(id).or_insert_with(|| Installation {
            repos: Vec::new(),
            tokens: Vec::new(),
            revoked: Vec::new(),
            minted: 0,
        });
        for r in repos {
            let key = r.to_ascii_lowercase();
            if !inst.repos.contains(&key) {
                inst.repos.push(key);
            }
        }
    }

    /// The App is uninstalled (`installation` `deleted`): GitHub revokes the installation's
    /// tokens (401 "Bad credentials") and mints no new one (404).
    pub fn delete_installation(&self, id: u64) {
        self.world().installations.remove(&id);
    }

    /// Repositories taken out of an installation (`installation_repositories` `removed`): its
    /// tokens no longer cover them (404; using one there is recorded as a violation).
    pub fn remove_repos(&self, id: u64, repos: &[&str]) {
        if let Some(inst) = self.world().installations.get_mut(&id) {
            inst.repos
                .retain(|r| !repos.iter().any(|x| x.eq_ignore_ascii_case(r)));
        }
    }

    /// A repository (no installation covers it unless added to one).
    pub fn add_repo(&self, full_name: &str) {
        self.world().repo_mut(full_name);
    }

    /// Add or replace a pull request.
    pub fn add_pull(&self, repo: &str, pull: FakePull) {
        self.world().repo_mut(repo).pulls.insert(pull.number, pull);
    }

    /// A comment by someone else (a user unless `author` ends in `[bot]`); returns its id.
    pub fn add_comment(&self, repo: &str, issue: u64, author: &str, body: &str) -> u64 {
        let mut w = self.world();
        let id = w.id();
        let now = Utc::now();
        w.repo_mut(repo).comments.push(FakeComment {
            id,
            issue,
            body: body.to_string(),
            author: author.to_string(),
            by_app: false,
            edits: Vec::new(),
            created_at: now,
            updated_at: now,
            reactions: Vec::new(),
        });
        id
    }

    /// Someone deletes a comment.
    pub fn delete_comment(&self, repo: &str, comment_id: u64) {
        self.world()
            .repo_mut(repo)
            .comments
            .retain(|c| c.id != comment_id);
    }

    /// `user`'s role on `repo`: admin, maintain, write, triage, read or none.
    pub fn set_permission(&self, repo: &str, user: &str, role: &str) {
        self.world()
            .repo_mut(repo)
            .permissions
            .insert(user.to_ascii_lowercase(), role.to_string());
    }

    /// Register workflow file `file` (`grade.yml`) in `repo`, accepting any dispatch inputs. A
    /// dispatch of a workflow that was not registered gets GitHub's 404.
    pub fn add_workflow(&self, repo: &str, file: &str) {
        self.register_workflow(repo, file, None);
    }

    /// Register a workflow that declares exactly `inputs` under `on.workflow_dispatch`: a
    /// dispatch with any other input gets GitHub's 422 "Unexpected inputs provided".
    pub fn add_workflow_with_inputs(&self, repo: &str, file: &str, inputs: &[&str]) {
        let inputs = inputs.iter().map(|i| (*i).to_string()).collect();
        self.register_workflow(repo, file, Some(inputs));
    }

    fn register_workflow(&self, repo: &str, file: &str, inputs: Option<Vec<String>>) {
        let mut w = self.world();
        let id = w.id();
        let workflows = &mut w.repo_mut(repo).workflows;
        workflows.retain(|wf| wf.file != file);
        workflows.push(FakeWorkflow {
            id,
            file: file.to_string(),
            inputs,
        });
    }

    /// The workflow runs of `repo`, oldest first.
    pub fn workflow_runs(&self, repo: &str) -> Vec<FakeWorkflowRun> {
        self.world()
            .repos
            .get(&repo.to_ascii_lowercase())
            .map(|r| r.workflow_runs.clone())
            .unwrap_or_default()
    }

    /// What the runner did to run `id`: `status` (`in_progress`, `completed`, …) and
    /// `conclusion` (`success`, `failure`, `cancelled`, … once completed). Returns the run as it
    /// is now, for building its webhooks.
    #[track_caller]
    pub fn set_workflow_run(
        &self,
        repo: &str,
        id: u64,
        status: &str,
        conclusion: Option<&str>,
    ) -> FakeWorkflowRun {
        let mut w = self.world();
        let run = w
            .repos
            .get_mut(&repo.to_ascii_lowercase())
            .and_then(|r| r.workflow_runs.iter_mut().find(|run| run.id == id))
            .unwrap_or_else(|| panic!("no workflow run {id} in {repo}"));
        run.status = status.to_string();
        run.conclusion = conclusion.map(str::to_string);
        run.clone()
    }

    /// A webhook delivery in the App's delivery log; returns its id.
    pub fn add_delivery(&self, d: NewDelivery) -> u64 {
        let mut w = self.world();
        let id = w.id();
        w.deliveries.push(FakeDelivery {
            id,
            status: respond::delivery_status(d.status_code),
            guid: d.guid,
            event: d.event,
            action: d.action,
            status_code: d.status_code,
            delivered_at: d.delivered_at,
            redelivery: d.redelivery,
            installation_id: d.installation_id,
            repository_id: d.repository_id,
            redelivery_requests: 0,
            payload: d.payload,
        });
        id
    }

    /// How long minted installation tokens live (GitHub: 1 hour).
    pub fn set_token_ttl(&self, ttl: Duration) {
        self.world().token_ttl = ttl;
    }

    /// Revoke every token of an installation: they now get 401.
    pub fn revoke_tokens(&self, installation_id: u64) {
        if let Some(inst) = self.world().installations.get_mut(&installation_id) {
            let tokens = std::mem::take(&mut inst.tokens);
            inst.revoked.extend(tokens.into_iter().map(|(t, _)| t));
        }
    }

    /// The status code a redelivery records when no webhook target is set (default 200).
    pub fn set_redelivery_status(&self, status_code: u16) {
        self.world().redelivery_status_code = status_code;
    }

    /// Where webhooks go (`send_webhook`, redeliveries of deliveries with a payload), signed
    /// with `secret` as GitHub does (`X-Hub-Signature-256`).
    pub fn set_webhook_target(&self, url: &str, secret: &str) {
        self.world().webhook_target = Some(WebhookTarget {
            url: url.to_string(),
            secret: secret.to_string(),
        });
    }

    /// Deliver a webhook to the target now, as GitHub would, and log the delivery.
    pub async fn send_webhook(&self, event: &str, payload: Value) -> FakeDelivery {
        let (url, secret, id, guid) = {
            let mut w = self.world();
            let target = w.webhook_target.as_ref().expect("set_webhook_target first");
            let (url, secret) = (target.url.clone(), target.secret.clone());
            let id = w.id();
            let guid = uuid::Uuid::new_v4().to_string();
            w.deliveries.push(FakeDelivery {
                id,
                guid: guid.clone(),
                event: event.to_string(),
                action: payload["action"].as_str().map(str::to_string),
                status_code: 0,
                status: String::new(),
                delivered_at: Utc::now(),
                redelivery: false,
                installation_id: payload["installation"]["id"].as_u64(),
                repository_id: payload["repository"]["id"].as_u64(),
                redelivery_requests: 0,
                payload: Some(payload.clone()),
            });
            (url, secret, id, guid)
        };
        deliver(
            &self.shared,
            Outgoing {
                delivery_id: id,
                url,
                secret,
                event: event.to_string(),
                guid,
                payload,
            },
        )
        .await;
        self.deliveries()
            .into_iter()
            .find(|d| d.id == id)
            .expect("just logged")
    }

    // ---- faults --------------------------------------------------------------------------

    /// The next `n` requests matching `route` fail with `failure`. `route` is a path glob
    /// (`*` within a segment, `**` across), optionally after a method:
    /// `"PATCH /repos/*/*/check-runs/*"`, `"/app/installations/*/access_tokens"`.
    pub fn fail_next(&self, route: &str, n: usize, failure: Failure) {
        let (method, glob) = match route.split_once(' ') {
            Some((m, g)) => (Some(m.parse::<Method>().expect("an HTTP method")), g),
            None => (None, route),
        };
        self.world().failures.push(FailureRule {
            method,
            glob: glob.to_string(),
            remaining: n,
            failure,
        });
    }

    // ---- inspection ----------------------------------------------------------------------

    pub fn check_runs(&self, repo: &str) -> Vec<FakeCheckRun> {
        self.world()
            .repos
            .get(&repo.to_ascii_lowercase())
            .map(|r| r.check_runs.clone())
            .unwrap_or_default()
    }

    /// The check run named `name` that GitHub shows for commit `sha`, and that a branch
    /// protection rule requiring `name` reads: the newest one, whichever pull request (or
    /// none) it was posted for.
    pub fn latest_check_run(&self, repo: &str, sha: &str, name: &str) -> Option<FakeCheckRun> {
        self.check_runs(repo)
            .into_iter()
            .filter(|r| r.head_sha == sha && r.name == name)
            .max_by_key(|r| r.id)
    }

    /// Every comment of `repo`'s issue or pull request `issue`, with its reactions.
    pub fn comments(&self, repo: &str, issue: u64) -> Vec<FakeComment> {
        self.world()
            .repos
            .get(&repo.to_ascii_lowercase())
            .map(|r| {
                r.comments
                    .iter()
                    .filter(|c| c.issue == issue)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.world().requests.clone()
    }

    /// The requests that matched `operation` (e.g. `checks/update`).
    pub fn requests_to(&self, operation: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.operation == operation)
            .collect()
    }

    pub fn deliveries(&self) -> Vec<FakeDelivery> {
        self.world().deliveries.clone()
    }

    /// How many tokens were minted for an installation.
    pub fn tokens_minted(&self, installation_id: u64) -> usize {
        self.world()
            .installations
            .get(&installation_id)
            .map_or(0, |i| i.minted)
    }

    /// Everything our code sent that GitHub's description or rules do not allow.
    pub fn violations(&self) -> Vec<String> {
        self.world().violations.clone()
    }

    /// Forget the violations so far (after a test provoked some on purpose).
    pub fn clear_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.world().violations)
    }

    #[track_caller]
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "requests that github.com would not accept:\n  {}",
            v.join("\n  ")
        );
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.shared.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn serve(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return Response::builder()
                .status(400)
                .body(Body::from(format!("unreadable body: {e}")))
                .expect("response");
        }
    };
    let incoming = Incoming {
        method: &parts.method,
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: &parts.headers,
        body: &body,
    };
    let (answer, outgoing) = {
        let mut world = shared.world.lock().unwrap_or_else(|e| e.into_inner());
        handle::handle(&mut world, &shared.url, &incoming)
    };
    if let Some(out) = outgoing {
        deliver(&shared, out).await;
    }
    let mut response = Response::builder()
        .status(answer.status)
        .header("content-type", "application/json; charset=utf-8")
        .header("x-github-api-version-selected", API_VERSION)
        .header("x-github-request-id", uuid::Uuid::new_v4().to_string());
    for (k, v) in &answer.headers {
        response = response.header(k.as_str(), v.as_str());
    }
    let bytes = if answer.status == 204 {
        Vec::new()
    } else {
        serde_json::to_vec(&answer.body).expect("JSON")
    };
    response.body(Body::from(bytes)).expect("response")
}

/// POST a webhook to its target, signed, and record the outcome on the delivery.
async fn deliver(shared: &Shared, out: Outgoing) {
    let body = serde_json::to_vec(&out.payload).expect("JSON");
    let mut mac = Hmac::<Sha256>::new_from_slice(out.secret.as_bytes()).expect("HMAC key");
    mac.update(&body);
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let result = reqwest::Client::new()
        .post(&out.url)
        .header("content-type", "application/json")
        .header("user-agent", "GitHub-Hookshot/fake")
        .header("x-github-event", &out.event)
        .header("x-github-delivery", &out.guid)
        .header("x-hub-signature-256", signature)
        .header("x-github-hook-installation-target-type", "integration")
        .header("x-github-hook-installation-target-id", APP_ID.to_string())
        .body(body)
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await;
    let code = match result {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    };
    let mut world = shared.world.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = world
        .deliveries
        .iter_mut()
        .find(|d| d.id == out.delivery_id)
    {
        d.status_code = if code == 0 { 502 } else { code };
        d.status = respond::delivery_status(code);
    }
}
