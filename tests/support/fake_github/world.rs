//! The fake's state: what a test seeds, what our code changes, and what a test inspects.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use http::Method;
use serde_json::{Map, Value};

/// A pull request as a test seeds it.
#[derive(Debug, Clone)]
pub struct FakePull {
    pub number: u64,
    pub head_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    pub head_repo: HeadRepo,
    pub draft: bool,
    pub state_open: bool,
    pub author: String,
    pub author_is_bot: bool,
    pub labels: Vec<String>,
    pub body: Option<String>,
}

impl FakePull {
    /// An open, non-draft PR by `octocat` from branch `feature` of the same repository into
    /// `main`.
    pub fn new(number: u64, head_sha: &str) -> FakePull {
        FakePull {
            number,
            head_sha: head_sha.to_string(),
            head_ref: "feature".into(),
            base_ref: "main".into(),
            head_repo: HeadRepo::Same,
            draft: false,
            state_open: true,
            author: "octocat".into(),
            author_is_bot: false,
            labels: Vec::new(),
            body: Some("Please pull these changes in.".into()),
        }
    }
}

/// Where a PR's head lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadRepo {
    /// The base repository itself.
    Same,
    /// A fork, by full name.
    Fork(String),
    // (A deleted fork, `head.repo: null`, happens on github.com but the API description does
    // not allow it, so the fake cannot answer it.)
}

/// A check run as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeCheckRun {
    pub id: u64,
    pub app_id: u64,
    pub head_sha: String,
    pub name: String,
    pub external_id: Option<String>,
    pub details_url: Option<String>,
    pub status: String,
    pub conclusion: Option<String>,
    pub started_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub title: Option<String>,
    pub summary: Option<String>,
    pub text: Option<String>,
    /// Every annotation received, in order (GitHub appends).
    pub annotations: Vec<Value>,
    pub actions: Vec<Value>,
    /// Every request body that created or changed the run, in order.
    pub history: Vec<Value>,
}

/// A GitHub Actions workflow run as the fake holds it: made by a workflow dispatch, changed by
/// a cancel or by the test ([`super::FakeGitHub::set_workflow_run`], standing in for the runner).
#[derive(Debug, Clone, PartialEq)]
pub struct FakeWorkflowRun {
    pub id: u64,
    /// The workflow's file name (`grade.yml`).
    pub workflow: String,
    /// The branch or tag it was dispatched on.
    pub git_ref: String,
    /// The dispatch's inputs, as sent.
    pub inputs: Map<String, Value>,
    /// `queued`, `in_progress`, `completed`, … (what GitHub reports).
    pub status: String,
    pub conclusion: Option<String>,
    /// The run's name: the `name` input (the grading workflow's `run-name`), else the file name.
    pub display_title: String,
    pub run_attempt: u32,
    /// Someone asked GitHub to cancel it.
    pub cancel_requested: bool,
}

/// A workflow file registered in a repository ([`super::FakeGitHub::add_workflow`]).
#[derive(Debug, Clone)]
pub(crate) struct FakeWorkflow {
    pub id: u64,
    pub file: String,
    /// The inputs its `on.workflow_dispatch` declares; `None` accepts any.
    pub inputs: Option<Vec<String>>,
}

/// An issue or PR comment as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: u64,
    pub issue: u64,
    pub body: String,
    pub author: String,
    /// Made by the App (with an installation token).
    pub by_app: bool,
    /// Earlier bodies, oldest first.
    pub edits: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Reactions on the comment: (who, content such as `eyes` or `+1`), oldest first; one per
    /// person and content, as on GitHub.
    pub reactions: Vec<(String, String)>,
}

/// A webhook delivery of the App.
#[derive(Debug, Clone)]
pub struct FakeDelivery {
    pub id: u64,
    pub guid: String,
    pub event: String,
    pub action: Option<String>,
    pub status_code: u16,
    pub status: String,
    pub delivered_at: DateTime<Utc>,
    pub redelivery: bool,
    pub installation_id: Option<u64>,
    pub repository_id: Option<u64>,
    /// How many times our code asked for it to be delivered again.
    pub redelivery_requests: u32,
    /// The body that was (or would be) delivered, for redelivery to a webhook target.
    pub payload: Option<Value>,
}

/// A delivery as a test seeds it.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub guid: String,
    pub event: String,
    pub action: Option<String>,
    pub status_code: u16,
    pub delivered_at: DateTime<Utc>,
    pub redelivery: bool,
    pub installation_id: Option<u64>,
    pub repository_id: Option<u64>,
    pub payload: Option<Value>,
}

impl NewDelivery {
    /// A delivery of `event` that ended with `status_code`, a minute ago.
    pub fn new(guid: &str, event: &str, status_code: u16) -> NewDelivery {
        NewDelivery {
            guid: guid.to_string(),
            event: event.to_string(),
            action: None,
            status_code,
            delivered_at: Utc::now() - Duration::minutes(1),
            redelivery: false,
            installation_id: None,
            repository_id: None,
            payload: None,
        }
    }
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: Method,
    /// The path as sent (still percent-encoded).
    pub path: String,
    pub query: String,
    /// The operation it matched (`checks/update`), or `?`.
    pub operation: String,
    /// The JSON body, if any.
    pub body: Option<Value>,
    pub status: u16,
    /// `jwt`, `installation:<id>`, or `none`.
    pub caller: String,
    /// When the fake had read the whole request.
    pub received_at: std::time::Instant,
}

/// What an injected failure looks like on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// 500 with a JSON message.
    ServerError,
    /// 429 with `retry-after: retry_after_s`.
    RateLimited { retry_after_s: u64 },
    /// 403 "You have exceeded a secondary rate limit", no wait headers.
    SecondaryRateLimit,
    /// 403 with `x-ratelimit-remaining: 0` and `x-ratelimit-reset` = now + `reset_in_s`.
    PrimaryExhausted { reset_in_s: u64 },
    /// Any status with a GitHub-style `{message}` body.
    Status { status: u16, message: String },
}

pub(crate) struct FailureRule {
    pub method: Option<Method>,
    pub glob: String,
    pub remaining: usize,
    pub failure: Failure,
}

pub(crate) struct Installation {
    pub repos: Vec<String>,
    pub tokens: Vec<(String, DateTime<Utc>)>,
    pub revoked: Vec<String>,
    pub minted: usize,
}

pub(crate) struct RepoState {
    pub id: u64,
    pub full_name: String,
    pub pulls: BTreeMap<u64, FakePull>,
    pub check_runs: Vec<FakeCheckRun>,
    pub comments: Vec<FakeComment>,
    /// login (lower case) → admin|maintain|write|triage|read|none
    pub permissions: BTreeMap<String, String>,
    pub workflows: Vec<FakeWorkflow>,
    pub workflow_runs: Vec<FakeWorkflowRun>,
}

pub(crate) struct WebhookTarget {
    pub url: String,
    pub secret: String,
}

pub(crate) struct World {
    pub app_id: u64,
    pub app_slug: String,
    pub public_key_pem: String,
    pub installations: BTreeMap<u64, Installation>,
    /// Keyed by the lower-cased full name (GitHub names are case-insensitive).
    pub repos: BTreeMap<String, RepoState>,
    pub deliveries: Vec<FakeDelivery>,
    pub requests: Vec<RecordedRequest>,
    pub violations: Vec<String>,
    pub failures: Vec<FailureRule>,
    pub next_id: u64,
    pub token_ttl: Duration,
    pub redelivery_status_code: u16,
    pub rate_remaining: u64,
    pub webhook_target: Option<WebhookTarget>,
}

impl World {
    pub fn new(app_id: u64, app_slug: &str, public_key_pem: &str) -> World {
        World {
            app_id,
            app_slug: app_slug.to_string(),
            public_key_pem: public_key_pem.to_string(),
            installations: BTreeMap::new(),
            repos: BTreeMap::new(),
            deliveries: Vec::new(),
            requests: Vec::new(),
            violations: Vec::new(),
            failures: Vec::new(),
            next_id: 1000,
            token_ttl: Duration::hours(1),
            redelivery_status_code: 200,
            rate_remaining: 5000,
            webhook_target: None,
        }
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn bot_login(&self) -> String {
        format!("{}[bot]", self.app_slug)
    }

    pub fn repo_mut(&mut self, full_name: &str) -> &mut RepoState {
        let key = full_name.to_ascii_lowercase();
        if !self.repos.contains_key(&key) {
            let id = self.id();
            self.repos.insert(
                key.clone(),
                RepoState {
                    id,
                    full_name: full_name.to_string(),
                    pulls: BTreeMap::new(),
                    check_runs: Vec::new(),
                    comments: Vec::new(),
                    permissions: BTreeMap::new(),
                    workflows: Vec::new(),
                    workflow_runs: Vec::new(),
                },
            );
        }
        self.repos.get_mut(&key).expect("just inserted")
    }

    /// The first matching injected failure, consumed.
    pub fn take_failure(&mut self, method: &Method, path: &str) -> Option<Failure> {
        let i = self.failures.iter().position(|r| {
            r.remaining > 0
                && r.method.as_ref().is_none_or(|m| m == method)
                && glob_match(r.glob.as_bytes(), path.as_bytes())
        })?;
        let rule = &mut self.failures[i];
        rule.remaining -= 1;
        let failure = rule.failure.clone();
        if rule.remaining == 0 {
            self.failures.remove(i);
        }
        Some(failure)
    }
}

/// `*` matches within one path segment, `**` across segments.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern {
        [] => text.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
        [b'*', rest @ ..] => {
            let segment = text.iter().position(|&c| c == b'/').unwrap_or(text.len());
            (0..=segment).any(|i| glob_match(rest, &text[i..]))
        }
        [c, rest @ ..] => text.first() == Some(c) && glob_match(rest, &text[1..]),
    }
}
