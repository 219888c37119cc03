//! Webhook JSON → [`Event`]. Each event is read into private serde structs holding only the
//! fields we use (unknown fields are ignored), and a field that is missing or has the wrong
//! type is reported with its JSON path. Unknown events and actions are [`Event::Ignored`],
//! never errors: GitHub keeps adding them.

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

use super::event::{Event, PrAction, PullRequest, Repo};

/// Why a webhook body could not be read. The server answers 400 with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body is not JSON at all: truncated, not UTF-8, a syntax error.
    #[error("malformed JSON: {message}")]
    Malformed { message: String },
    /// The body is JSON, but a field we need is missing or has the wrong type. `path` is the
    /// JSON path of the offending value (`pull_request.head.sha`), or of the object missing a
    /// field (`.` is the top level; the message names the field).
    #[error("{event} payload: at `{path}`: {message}")]
    Invalid {
        event: String,
        path: String,
        message: String,
    },
}

/// Reads the body of one delivery whose `X-GitHub-Event` header is `event_header`.
pub fn parse(event_header: &str, body: &[u8]) -> Result<Event, ParseError> {
    // Every body must be UTF-8 JSON, whatever the event (serde_json does not check the UTF-8
    // of values it skips); this pass also finds the action.
    if let Err(e) = std::str::from_utf8(body) {
        return Err(ParseError::Malformed {
            message: format!("not UTF-8: {e}"),
        });
    }
    let envelope: Envelope = read(event_header, body)?;
    let event = event_header;
    let ignored = |action: Option<String>| Event::Ignored {
        event: event.to_owned(),
        action,
    };

    let action = match event {
        "ping" => return Ok(Event::Ping),
        "pull_request"
        | "check_run"
        | "check_suite"
        | "issue_comment"
        | "installation"
        | "installation_repositories"
        | "workflow_run"
        | "workflow_job" => envelope.action(event)?,
        _ => {
            return Ok(ignored(
                envelope.action.and_then(|a| a.as_str().map(str::to_owned)),
            ));
        }
    };

    Ok(match (event, action.as_str()) {
        ("pull_request", name) => match PrAction::from_github(name) {
            Some(action) => {
                let p: PullRequestPayload = read(event, body)?;
                Event::PullRequest {
                    action,
                    repo: p.repository.into(),
                    installation_id: p.installation.map(|i| i.id),
                    pr: p.pull_request.into(),
                }
            }
            None => ignored(Some(action)),
        },
        ("check_run", "rerequested") => {
            let p: CheckRunPayload = read(event, body)?;
            let pull_numbers = p.check_run.pull_requests.numbers_in(&p.repository);
            Event::CheckRunRerequested {
                installation_id: p.installation.map(|i| i.id),
                head_sha: p.check_run.head_sha,
                external_id: non_empty(p.check_run.external_id),
                pull_numbers,
                repo: p.repository.into(),
            }
        }
        ("check_run", "requested_action") => {
            let p: CheckRunPayload = read(event, body)?;
            let Some(requested) = p.requested_action else {
                return Err(invalid(event, ".", "missing field `requested_action`"));
            };
            let pull_numbers = p.check_run.pull_requests.numbers_in(&p.repository);
            Event::CheckRunRequestedAction {
                installation_id: p.installation.map(|i| i.id),
                head_sha: p.check_run.head_sha,
                external_id: non_empty(p.check_run.external_id),
                identifier: requested.identifier,
                pull_numbers,
                repo: p.repository.into(),
            }
        }
        ("check_suite", "requested" | "rerequested") => {
            let p: CheckSuitePayload = read(event, body)?;
            let pull_numbers = p.check_suite.pull_requests.numbers_in(&p.repository);
            Event::CheckSuite {
                rerequested: action == "rerequested",
                installation_id: p.installation.map(|i| i.id),
                head_sha: p.check_suite.head_sha,
                pull_numbers,
                repo: p.repository.into(),
            }
        }
        ("issue_comment", "created") => {
            let p: IssueCommentPayload = read(event, body)?;
            Event::IssueComment {
                repo: p.repository.into(),
                installation_id: p.installation.map(|i| i.id),
                issue_number: p.issue.number,
                is_pull_request: p.issue.pull_request.is_some(),
                comment_id: p.comment.id,
                author_login: p.comment.user.login,
                body: p.comment.body,
            }
        }
        ("installation", _) => {
            let p: InstallationPayload = read(event, body)?;
            Event::Installation {
                installation_id: p.installation.id,
                repositories: full_names(p.repositories.unwrap_or_default()),
                action,
            }
        }
        ("installation_repositories", _) => {
            let p: InstallationRepositoriesPayload = read(event, body)?;
            Event::InstallationRepositories {
                installation_id: p.installation.id,
                added: full_names(p.repositories_added),
                removed: full_names(p.repositories_removed),
            }
        }
        ("workflow_run", _) => {
            let p: WorkflowRunPayload = read(event, body)?;
            Event::WorkflowRun {
                action,
                repo: p.repository.into(),
                installation_id: p.installation.map(|i| i.id),
                run_id: p.workflow_run.id,
                status: p.workflow_run.status,
                conclusion: p.workflow_run.conclusion,
                display_title: p.workflow_run.display_title,
            }
        }
        ("workflow_job", _) => {
            let p: WorkflowJobPayload = read(event, body)?;
            Event::WorkflowJob {
                action,
                repo: p.repository.into(),
                installation_id: p.installation.map(|i| i.id),
                run_id: p.workflow_job.run_id,
                job_id: p.workflow_job.id,
                status: p.workflow_job.status,
                conclusion: p.workflow_job.conclusion,
                runner_name: non_empty(p.workflow_job.runner_name),
            }
        }
        _ => ignored(Some(action)),
    })
}

/// Deserialises `body` as `T`, keeping the path of whatever went wrong.
fn read<T: DeserializeOwned>(event: &str, body: &[u8]) -> Result<T, ParseError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => invalid(event, &path, &inner.to_string()),
            _ => ParseError::Malformed {
                message: inner.to_string(),
            },
        }
    })?;
    // Trailing garbage after the value is malformed too.
    de.end().map_err(|e| ParseError::Malformed {
        message: e.to_string(),
    })?;
    Ok(value)
}

fn invalid(event: &str, path: &str, message: &str) -> ParseError {
    ParseError::Invalid {
        event: event.to_owned(),
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

/// GitHub sends `external_id: ""` for check runs created without one; an empty string names
/// nothing (also for `runner_name`).
fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn full_names(repos: Vec<RepoName>) -> Vec<String> {
    repos.into_iter().map(|r| r.full_name).collect()
}

/// The part of every payload read first. `action` stays a raw value so that an unknown event
/// with an odd `action` is still just ignored.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    action: Option<Value>,
}

impl Envelope {
    /// The `action` of an event that must have one.
    fn action(self, event: &str) -> Result<String, ParseError> {
        match self.action {
            Some(Value::String(action)) => Ok(action),
            None => Err(invalid(event, ".", "missing field `action`")),
            Some(other) => Err(invalid(
                event,
                "action",
                &format!("expected a string, found {other}"),
            )),
        }
    }
}

#[derive(Deserialize)]
struct Repository {
    id: u64,
    name: String,
    owner: Login,
}

impl From<Repository> for Repo {
    fn from(r: Repository) -> Repo {
        Repo {
            owner: r.owner.login,
            name: r.name,
        }
    }
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

#[derive(Deserialize)]
struct InstallationRef {
    id: u64,
}

#[derive(Deserialize)]
struct RepoName {
    full_name: String,
}

#[derive(Deserialize)]
struct PullRequestPayload {
    repository: Repository,
    installation: Option<InstallationRef>,
    pull_request: PullRequestObject,
}

#[derive(Deserialize)]
struct PullRequestObject {
    number: u64,
    state: String,
    draft: Option<bool>,
    user: User,
    #[serde(default)]
    labels: Vec<Label>,
    body: Option<String>,
    head: Head,
    base: Base,
}

#[derive(Deserialize)]
struct User {
    login: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Label {
    name: String,
}

#[derive(Deserialize)]
struct Head {
    #[serde(rename = "ref")]
    git_ref: String,
    sha: String,
    /// null when the head repository (a fork) was deleted.
    repo: Option<HeadRepo>,
}

#[derive(Deserialize)]
struct HeadRepo {
    full_name: String,
    clone_url: String,
}

#[derive(Deserialize)]
struct Base {
    #[serde(rename = "ref")]
    git_ref: String,
}

impl From<PullRequestObject> for PullRequest {
    fn from(p: PullRequestObject) -> PullRequest {
        let (head_repo_full_name, head_clone_url) = match p.head.repo {
            Some(r) => (Some(r.full_name), Some(r.clone_url)),
            None => (None, None),
        };
        PullRequest {
            number: p.number,
            head_sha: p.head.sha,
            head_ref: p.head.git_ref,
            base_ref: p.base.git_ref,
            head_repo_full_name,
            head_clone_url,
            draft: p.draft.unwrap_or(false),
            state_open: p.state == "open",
            author_login: p.user.login,
            author_is_bot: p.user.kind == "Bot",
            labels: p.labels.into_iter().map(|l| l.name).collect(),
            body: p.body,
        }
    }
}

#[derive(Deserialize)]
struct CheckRunPayload {
    repository: Repository,
    installation: Option<InstallationRef>,
    check_run: CheckObject,
    requested_action: Option<RequestedAction>,
}

#[derive(Deserialize)]
struct CheckSuitePayload {
    repository: Repository,
    installation: Option<InstallationRef>,
    check_suite: CheckObject,
}

/// What a check run and a check suite have in common.
#[derive(Deserialize)]
struct CheckObject {
    head_sha: String,
    #[serde(default)]
    external_id: Option<String>,
    #[serde(default)]
    pull_requests: CheckPulls,
}

#[derive(Deserialize, Default)]
#[serde(transparent)]
struct CheckPulls(Vec<CheckPull>);

impl CheckPulls {
    /// Numbers of the listed PRs whose base is `repo`: GitHub may list PRs of other
    /// repositories that share the head commit, and those numbers mean nothing here.
    fn numbers_in(&self, repo: &Repository) -> Vec<u64> {
        let mut numbers: Vec<u64> = self
            .0
            .iter()
            .filter(|p| {
                p.base
                    .as_ref()
                    .and_then(|b| b.repo.as_ref())
                    .is_none_or(|r| r.id == repo.id)
            })
            .map(|p| p.number)
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
    }
}

#[derive(Deserialize)]
struct CheckPull {
    number: u64,
    base: Option<CheckPullBase>,
}

#[derive(Deserialize)]
struct CheckPullBase {
    repo: Option<RepoId>,
}

#[derive(Deserialize)]
struct RepoId {
    id: u64,
}

#[derive(Deserialize)]
struct RequestedAction {
    identifier: String,
}

#[derive(Deserialize)]
struct IssueCommentPayload {
    repository: Repository,
    installation: Option<InstallationRef>,
    issue: Issue,
    comment: Comment,
}

#[derive(Deserialize)]
struct Issue {
    number: u64,
    /// Present (an object of links) when the issue is a pull request.
    pull_request: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Comment {
    id: u64,
    user: Login,
    body: String,
}

#[derive(Deserialize)]
struct InstallationPayload {
    installation: InstallationRef,
    repositories: Option<Vec<RepoName>>,
}

#[derive(Deserialize)]
struct InstallationRepositoriesPayload {
    installation: InstallationRef,
    #[serde(default)]
    repositories_added: Vec<RepoName>,
    #[serde(default)]
    repositories_removed: Vec<RepoName>,
}

#[derive(Deserialize)]
struct WorkflowRunPayload {
    repository: Repository,
    installation: Option<InstallationRef>,
    workflow_run: WorkflowRunObject,
}

#[derive(Deserialize)]
struct WorkflowRunObject {
    id: u64,
    status: String,
    conclusion: Option<String>,
    display_title: String,
}

#[derive(Deserialize)]
struct WorkflowJobPayload {
    repository: Repository,
    installation: Option<InstallationRef>,
    workflow_job: WorkflowJobObject,
}

#[derive(Deserialize)]
struct WorkflowJobObject {
    id: u64,
    run_id: u64,
    status: String,
    conclusion: Option<String>,
    /// null (or absent) until a runner takes the job.
    #[serde(default)]
    runner_name: Option<String>,
}
