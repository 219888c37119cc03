//! Calls on one repository, as one installation: check runs, the sticky comment, permissions,
//! pull requests.

use std::fmt;

use http::{Method, StatusCode};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::app::GitHubApp;
use super::body::{
    actions_json, annotation_json, check_comment, output_head, output_json, put_status, timestamp,
};
use super::error::GitHubError;
use super::transport::{Reply, Transport, api_error, decode, enc, next_link_param};
use super::types::{
    Annotation, CheckOutput, CheckRunCreate, CheckRunSummary, CheckRunUpdate,
    MAX_ANNOTATIONS_PER_REQUEST, PullSummary,
};

/// Items per page when listing.
pub(super) const PER_PAGE: usize = 100;
/// At most this many pages are read in one listing.
const MAX_PAGES: usize = 100;

/// A client for `owner/repo` acting as one installation, or with one plain token (a workflow's
/// `GITHUB_TOKEN`). Cheap to clone; an installation's token is taken from the App's cache on
/// every call, so a long-lived client never uses an expired token.
#[derive(Clone)]
pub struct RepoClient {
    auth: Auth,
    owner: String,
    repo: String,
}

#[derive(Clone)]
enum Auth {
    Installation {
        app: GitHubApp,
        installation_id: u64,
    },
    /// A token we neither mint nor refresh; we do not know which App (if any) it acts as.
    Token {
        transport: Box<Transport>,
        token: SecretString,
    },
}

impl fmt::Debug for RepoClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepoClient")
            .field("installation_id", &self.installation_id())
            .field("repo", &format_args!("{}/{}", self.owner, self.repo))
            .finish()
    }
}

#[derive(Deserialize)]
struct Created {
    id: u64,
}

#[derive(Deserialize)]
struct AppRef {
    id: u64,
}

#[derive(Deserialize)]
struct CheckRunItem {
    id: u64,
    name: String,
    external_id: Option<String>,
    app: Option<AppRef>,
    status: String,
    conclusion: Option<String>,
}

#[derive(Deserialize)]
struct CheckRunList {
    total_count: u64,
    check_runs: Vec<CheckRunItem>,
}

#[derive(Deserialize)]
struct UserRef {
    login: String,
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct CommentItem {
    id: u64,
    body: Option<String>,
    user: Option<UserRef>,
    performed_via_github_app: Option<AppRef>,
}

#[derive(Deserialize)]
struct PermissionReply {
    permission: String,
    role_name: Option<String>,
}

#[derive(Deserialize)]
struct LabelRef {
    name: String,
}

#[derive(Deserialize)]
struct HeadRepo {
    full_name: String,
    clone_url: String,
}

#[derive(Deserialize)]
struct PullHead {
    sha: String,
    #[serde(rename = "ref")]
    git_ref: String,
    repo: Option<HeadRepo>,
}

#[derive(Deserialize)]
struct PullBase {
    #[serde(rename = "ref")]
    git_ref: String,
}

#[derive(Deserialize)]
struct PullReply {
    number: u64,
    state: String,
    draft: Option<bool>,
    body: Option<String>,
    user: UserRef,
    labels: Vec<LabelRef>,
    head: PullHead,
    base: PullBase,
}

/// The six permission words, from most to least.
const ROLES: [&str; 6] = ["admin", "maintain", "write", "triage", "read", "none"];

/// Clients are made by the App; the impl lives here so that `app.rs` never names the client.
impl GitHubApp {
    /// A client for one repository of an installation. Makes sure a token can be had.
    pub async fn client(
        &self,
        installation_id: u64,
        owner: &str,
        repo: &str,
    ) -> Result<RepoClient, GitHubError> {
        self.installation_token(installation_id).await?;
        Ok(RepoClient::new(self.clone(), installation_id, owner, repo))
    }
}

impl RepoClient {
    pub(crate) fn new(app: GitHubApp, installation_id: u64, owner: &str, repo: &str) -> Self {
        RepoClient {
            auth: Auth::Installation {
                app,
                installation_id,
            },
            owner: owner.to_string(),
            repo: repo.to_string(),
        }
    }

    /// A client that calls `api_url` with one plain token, such as a workflow's `GITHUB_TOKEN`
    /// (`infradev action`). The token is never refreshed; a 401 is an error. Without an App id,
    /// [`RepoClient::find_check_run_by_external_id`] matches any app's runs and
    /// [`RepoClient::find_comment_with_marker`] any bot's comments.
    pub fn with_token(
        api_url: &str,
        token: SecretString,
        owner: &str,
        repo: &str,
    ) -> anyhow::Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            anyhow::bail!("RepoClient::with_token must be called inside a Tokio runtime");
        }
        Ok(RepoClient {
            auth: Auth::Token {
                transport: Box::new(Transport::new(api_url)?),
                token,
            },
            owner: owner.to_string(),
            repo: repo.to_string(),
        })
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The installation this client acts as; `None` for a plain token.
    pub fn installation_id(&self) -> Option<u64> {
        match &self.auth {
            Auth::Installation {
                installation_id, ..
            } => Some(*installation_id),
            Auth::Token { .. } => None,
        }
    }

    /// The App this client acts as; `None` for a plain token.
    fn app_id(&self) -> Option<u64> {
        match &self.auth {
            Auth::Installation { app, .. } => Some(app.app_id()),
            Auth::Token { .. } => None,
        }
    }

    /// Create a check run; returns its id. More than 50 annotations go out in further PATCHes.
    pub async fn create_check_run(&self, run: &CheckRunCreate) -> Result<u64, GitHubError> {
        let mut body = Map::new();
        body.insert("name".into(), json!(run.name));
        body.insert("head_sha".into(), json!(run.head_sha));
        if let Some(id) = &run.external_id {
            body.insert("external_id".into(), json!(id));
        }
        if let Some(url) = &run.details_url {
            body.insert("details_url".into(), json!(url));
        }
        if let Some(at) = run.started_at {
            body.insert("started_at".into(), json!(timestamp(at)));
        }
        put_status(
            &mut body,
            Some(run.status),
            run.conclusion,
            run.completed_at,
        )?;
        if !run.actions.is_empty() {
            body.insert("actions".into(), actions_json(&run.actions)?);
        }
        let rest = match &run.output {
            Some(output) => {
                let (json, rest) = output_json(output);
                body.insert("output".into(), json);
                rest
            }
            None => &[][..],
        };
        let path = self.path("/check-runs");
        let reply = self
            .call_ok(Method::POST, &path, Some(&Value::Object(body)))
            .await?;
        let created: Created = decode(&Method::POST, &path, &reply)?;
        if let Some(output) = &run.output {
            self.append_annotations(created.id, output, rest).await?;
        }
        Ok(created.id)
    }

    /// Update a check run. With output, the first PATCH carries the status, conclusion, output
    /// and the first 50 annotations; further PATCHes append 50 more each.
    pub async fn update_check_run(
        &self,
        check_run_id: u64,
        update: &CheckRunUpdate,
    ) -> Result<(), GitHubError> {
        let mut body = Map::new();
        if let Some(at) = update.started_at {
            body.insert("started_at".into(), json!(timestamp(at)));
        }
        put_status(
            &mut body,
            update.status,
            update.conclusion,
            update.completed_at,
        )?;
        if let Some(actions) = &update.actions {
            body.insert("actions".into(), actions_json(actions)?);
        }
        let rest = match &update.output {
            Some(output) => {
                let (json, rest) = output_json(output);
                body.insert("output".into(), json);
                rest
            }
            None => &[][..],
        };
        let path = self.path(&format!("/check-runs/{check_run_id}"));
        self.call_ok(Method::PATCH, &path, Some(&Value::Object(body)))
            .await?;
        if let Some(output) = &update.output {
            self.append_annotations(check_run_id, output, rest).await?;
        }
        Ok(())
    }

    /// PATCH the output again with each further batch of annotations (GitHub appends them).
    async fn append_annotations(
        &self,
        check_run_id: u64,
        output: &CheckOutput,
        rest: &[Annotation],
    ) -> Result<(), GitHubError> {
        let path = self.path(&format!("/check-runs/{check_run_id}"));
        for batch in rest.chunks(MAX_ANNOTATIONS_PER_REQUEST) {
            let mut out = output_head(output);
            out.insert(
                "annotations".into(),
                Value::Array(batch.iter().map(annotation_json).collect()),
            );
            let body = json!({ "output": Value::Object(out) });
            self.call_ok(Method::PATCH, &path, Some(&body)).await?;
        }
        Ok(())
    }

    /// The newest check run of this App named `name` on `head_sha` with `external_id`.
    pub async fn find_check_run_by_external_id(
        &self,
        head_sha: &str,
        name: &str,
        external_id: &str,
    ) -> Result<Option<u64>, GitHubError> {
        Ok(self
            .check_runs_named(head_sha, name)
            .await?
            .into_iter()
            .filter(|run| run.external_id.as_deref() == Some(external_id))
            .map(|run| run.id)
            .max())
    }

    /// Every check run of this App named `name` on commit `head_sha` (all of them, not only
    /// the newest), oldest first.
    pub async fn check_runs_named(
        &self,
        head_sha: &str,
        name: &str,
    ) -> Result<Vec<CheckRunSummary>, GitHubError> {
        let app_id = self.app_id();
        let app_filter = app_id.map(|id| format!("&app_id={id}")).unwrap_or_default();
        let mut found = Vec::new();
        let mut seen = 0u64;
        for page in 1..=MAX_PAGES {
            let path = self.path(&format!(
                "/commits/{}/check-runs?check_name={}&filter=all{app_filter}&per_page={PER_PAGE}&page={page}",
                enc(head_sha),
                enc(name),
            ));
            let reply = self.call_ok(Method::GET, &path, None).await?;
            let list: CheckRunList = decode(&Method::GET, &path, &reply)?;
            seen += list.check_runs.len() as u64;
            let count = list.check_runs.len();
            for run in list.check_runs {
                let ours = match (app_id, &run.app) {
                    (Some(app_id), Some(a)) => a.id == app_id,
                    _ => true,
                };
                if ours && run.name == name {
                    found.push(CheckRunSummary {
                        id: run.id,
                        external_id: run.external_id,
                        status: run.status,
                        conclusion: run.conclusion,
                    });
                }
            }
            if count == 0 || seen >= list.total_count || !has_next(&reply, count) {
                break;
            }
        }
        found.sort_by_key(|r| r.id);
        found.dedup_by_key(|r| r.id);
        Ok(found)
    }

    /// The oldest comment of this App on the issue or PR whose body contains `marker`.
    pub async fn find_comment_with_marker(
        &self,
        issue_number: u64,
        marker: &str,
    ) -> Result<Option<u64>, GitHubError> {
        let app_id = self.app_id();
        for page in 1..=MAX_PAGES {
            let path = self.path(&format!(
                "/issues/{issue_number}/comments?per_page={PER_PAGE}&page={page}"
            ));
            let reply = self.call_ok(Method::GET, &path, None).await?;
            let comments: Vec<CommentItem> = decode(&Method::GET, &path, &reply)?;
            let count = comments.len();
            for c in comments {
                let by_app = c.performed_via_github_app.as_ref().map(|a| a.id);
                let by_bot = c.user.as_ref().is_some_and(|u| {
                    u.kind.as_deref() == Some("Bot") && u.login.ends_with("[bot]")
                });
                let ours = match app_id {
                    Some(app_id) => by_app == Some(app_id) || (by_app.is_none() && by_bot),
                    // A plain token's comments are a bot's (`github-actions[bot]`).
                    None => by_bot,
                };
                if ours && c.body.as_deref().is_some_and(|b| b.contains(marker)) {
                    return Ok(Some(c.id));
                }
            }
            if count == 0 || !has_next(&reply, count) {
                break;
            }
        }
        Ok(None)
    }

    /// Comment on an issue or PR; returns the comment id.
    pub async fn create_comment(&self, issue_number: u64, body: &str) -> Result<u64, GitHubError> {
        check_comment(body)?;
        let path = self.path(&format!("/issues/{issue_number}/comments"));
        let reply = self
            .call_ok(Method::POST, &path, Some(&json!({ "body": body })))
            .await?;
        let created: Created = decode(&Method::POST, &path, &reply)?;
        Ok(created.id)
    }

    /// Replace a comment's body.
    pub async fn update_comment(&self, comment_id: u64, body: &str) -> Result<(), GitHubError> {
        check_comment(body)?;
        let path = self.path(&format!("/issues/comments/{comment_id}"));
        self.call_ok(Method::PATCH, &path, Some(&json!({ "body": body })))
            .await?;
        Ok(())
    }

    /// `username`'s role on the repository: admin, maintain, write, triage, read or none (from
    /// `role_name` when it is one of those, else from `permission`). A user GitHub does not know
    /// here (404) has none.
    pub async fn permission(&self, username: &str) -> Result<String, GitHubError> {
        let path = self.path(&format!("/collaborators/{}/permission", enc(username)));
        let reply = self.call(Method::GET, &path, None).await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Ok("none".to_string());
        }
        if !reply.status.is_success() {
            return Err(api_error(&Method::GET, &path, &reply));
        }
        let p: PermissionReply = decode(&Method::GET, &path, &reply)?;
        let role = p
            .role_name
            .filter(|r| ROLES.contains(&r.as_str()))
            .unwrap_or(p.permission);
        if ROLES.contains(&role.as_str()) {
            Ok(role)
        } else {
            Err(GitHubError::Decode {
                method: "GET".into(),
                path,
                message: format!("unknown permission {role:?}"),
            })
        }
    }

    /// What we need of a pull request.
    pub async fn pull_request(&self, number: u64) -> Result<PullSummary, GitHubError> {
        let path = self.path(&format!("/pulls/{number}"));
        let reply = self.call_ok(Method::GET, &path, None).await?;
        let pr: PullReply = decode(&Method::GET, &path, &reply)?;
        Ok(summary(pr))
    }

    /// Every open pull request of the repository (`GET /repos/{o}/{r}/pulls?state=open`,
    /// every page), newest first.
    pub async fn open_pull_requests(&self) -> Result<Vec<PullSummary>, GitHubError> {
        let mut pulls = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = self.path(&format!(
                "/pulls?state=open&per_page={PER_PAGE}&page={page}"
            ));
            let reply = self.call_ok(Method::GET, &path, None).await?;
            let items: Vec<PullReply> = decode(&Method::GET, &path, &reply)?;
            let count = items.len();
            pulls.extend(items.into_iter().map(summary));
            if count == 0 || !has_next(&reply, count) {
                break;
            }
        }
        Ok(pulls)
    }

    /// React to an issue or PR comment (`POST …/issues/comments/{id}/reactions`; `content` is
    /// one of GitHub's eight: `+1`, `-1`, `laugh`, `confused`, `heart`, `hooray`, `rocket`,
    /// `eyes`). Reacting twice the same way is not an error.
    pub async fn react_to_comment(
        &self,
        comment_id: u64,
        content: &str,
    ) -> Result<(), GitHubError> {
        let path = self.path(&format!("/issues/comments/{comment_id}/reactions"));
        self.call_ok(Method::POST, &path, Some(&json!({ "content": content })))
            .await?;
        Ok(())
    }

    /// `/repos/{owner}/{repo}` followed by `rest`.
    pub(super) fn path(&self, rest: &str) -> String {
        format!("/repos/{}/{}{rest}", enc(&self.owner), enc(&self.repo))
    }

    /// One call with the installation token. A 401 means the cached token went stale (revoked,
    /// installation changed): forget it and try once more with a fresh one. A plain token is
    /// sent as it is, once.
    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, GitHubError> {
        let (app, installation_id) = match &self.auth {
            Auth::Installation {
                app,
                installation_id,
            } => (app, *installation_id),
            Auth::Token { transport, token } => {
                return transport.send(method, path, token, body).await;
            }
        };
        let token = app.installation_token(installation_id).await?;
        let reply = app
            .transport()
            .send(method.clone(), path, &token, body)
            .await?;
        if reply.status != StatusCode::UNAUTHORIZED {
            return Ok(reply);
        }
        app.forget_stale_token(installation_id, &token).await;
        let token = app.installation_token(installation_id).await?;
        app.transport().send(method, path, &token, body).await
    }

    pub(super) async fn call_ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, GitHubError> {
        let reply = self.call(method.clone(), path, body).await?;
        if reply.status.is_success() {
            Ok(reply)
        } else {
            Err(api_error(&method, path, &reply))
        }
    }
}

/// What we keep of a pull request.
fn summary(pr: PullReply) -> PullSummary {
    PullSummary {
        number: pr.number,
        head_sha: pr.head.sha,
        head_ref: pr.head.git_ref,
        base_ref: pr.base.git_ref,
        head_repo_full_name: pr.head.repo.as_ref().map(|r| r.full_name.clone()),
        head_clone_url: pr.head.repo.map(|r| r.clone_url),
        draft: pr.draft.unwrap_or(false),
        state_open: pr.state == "open",
        author_is_bot: pr.user.kind.as_deref() == Some("Bot"),
        author_login: pr.user.login,
        labels: pr.labels.into_iter().map(|l| l.name).collect(),
        body: pr.body,
    }
}

/// Whether another page follows: the `Link` header says so, or (without one) the page was full.
pub(super) fn has_next(reply: &Reply, count: usize) -> bool {
    match reply.headers.get(http::header::LINK) {
        Some(_) => next_link_param(&reply.headers, "page").is_some(),
        None => count >= PER_PAGE,
    }
}
