//! Plain data that other modules build and read. No octocrab types here: these are the words of
//! the contract, and `client.rs` turns them into the JSON GitHub expects.

use chrono::{DateTime, Utc};

/// The longest `output.summary` / `output.text` GitHub accepts (characters).
pub const MAX_OUTPUT_CHARS: usize = 65_535;
/// The longest issue-comment body GitHub accepts (characters).
pub const MAX_COMMENT_CHARS: usize = 65_536;
/// Annotations GitHub accepts in one check-run request.
pub const MAX_ANNOTATIONS_PER_REQUEST: usize = 50;
/// The longest annotation title GitHub accepts (characters).
pub const MAX_ANNOTATION_TITLE_CHARS: usize = 255;
/// The longest annotation message GitHub accepts (bytes: "64 KB").
pub const MAX_ANNOTATION_MESSAGE_BYTES: usize = 64 * 1024;

/// A check run's status. `Completed` is only meaningful together with a [`Conclusion`]; setting a
/// conclusion always completes the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Queued,
    InProgress,
    Completed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
        }
    }
}

/// How a completed check run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conclusion {
    Success,
    Failure,
    Neutral,
    Cancelled,
}

impl Conclusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Conclusion::Success => "success",
            Conclusion::Failure => "failure",
            Conclusion::Neutral => "neutral",
            Conclusion::Cancelled => "cancelled",
        }
    }
}

/// An annotation's level, as GitHub names it (`annotation_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnnotationLevel {
    Notice,
    Warning,
    Failure,
}

impl AnnotationLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            AnnotationLevel::Notice => "notice",
            AnnotationLevel::Warning => "warning",
            AnnotationLevel::Failure => "failure",
        }
    }
}

/// One line-range annotation on a file of the head commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub level: AnnotationLevel,
    pub message: String,
    pub title: Option<String>,
}

/// A button on the check run (at most 3; label ≤ 20, description ≤ 40, identifier ≤ 20 chars).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckAction {
    pub label: String,
    pub description: String,
    pub identifier: String,
}

/// The check run's output. `summary` and `text` longer than [`MAX_OUTPUT_CHARS`] are cut (with a
/// visible note) by the client; annotations beyond [`MAX_ANNOTATIONS_PER_REQUEST`] are sent in
/// further requests, which GitHub appends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckOutput {
    pub title: String,
    pub summary: String,
    pub text: Option<String>,
    pub annotations: Vec<Annotation>,
}

/// A new check run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRunCreate {
    pub name: String,
    pub head_sha: String,
    pub external_id: Option<String>,
    pub details_url: Option<String>,
    /// `Queued` or `InProgress`; `Completed` needs `conclusion`.
    pub status: Status,
    pub started_at: Option<DateTime<Utc>>,
    pub conclusion: Option<Conclusion>,
    pub completed_at: Option<DateTime<Utc>>,
    pub output: Option<CheckOutput>,
    pub actions: Vec<CheckAction>,
}

impl CheckRunCreate {
    /// A queued run with nothing else set.
    pub fn queued(name: impl Into<String>, head_sha: impl Into<String>) -> Self {
        CheckRunCreate {
            name: name.into(),
            head_sha: head_sha.into(),
            external_id: None,
            details_url: None,
            status: Status::Queued,
            started_at: None,
            conclusion: None,
            completed_at: None,
            output: None,
            actions: Vec::new(),
        }
    }
}

/// A change to an existing check run. Fields left `None` are not sent. A `conclusion` completes
/// the run (`status: completed`, `completed_at` = now unless given).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckRunUpdate {
    pub status: Option<Status>,
    pub started_at: Option<DateTime<Utc>>,
    pub conclusion: Option<Conclusion>,
    pub completed_at: Option<DateTime<Utc>>,
    pub output: Option<CheckOutput>,
    /// `None` leaves the buttons alone; `Some(vec![])` removes them.
    pub actions: Option<Vec<CheckAction>>,
}

/// A check run as listed for a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRunSummary {
    pub id: u64,
    pub external_id: Option<String>,
    /// `queued`, `in_progress`, `completed`, …
    pub status: String,
    /// Once completed: `success`, `failure`, `neutral`, `cancelled`, …
    pub conclusion: Option<String>,
}

/// What we read of a pull request (`GET /repos/{o}/{r}/pulls/{n}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSummary {
    pub number: u64,
    pub head_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    /// `head.repo.full_name`; `None` when the head repository was deleted.
    pub head_repo_full_name: Option<String>,
    /// `head.repo.clone_url`; `None` when the head repository was deleted.
    pub head_clone_url: Option<String>,
    pub draft: bool,
    pub state_open: bool,
    pub author_login: String,
    /// `user.type == "Bot"`.
    pub author_is_bot: bool,
    pub labels: Vec<String>,
    pub body: Option<String>,
}

/// A webhook delivery of the App that did not succeed and was not redelivered successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedDelivery {
    pub id: u64,
    /// `X-GitHub-Delivery`; a redelivery keeps it.
    pub guid: String,
    pub delivered_at: DateTime<Utc>,
    pub event: String,
    pub action: Option<String>,
    pub status: String,
    pub status_code: u16,
    pub redelivery: bool,
    pub installation_id: Option<u64>,
    pub repository_id: Option<u64>,
}

/// What we read of a GitHub Actions workflow run (`GET /repos/{o}/{r}/actions/runs/{id}`): enough
/// to follow a dispatched grade and to find it again by its name after a crash.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRunSummary {
    pub id: u64,
    /// `requested`, `queued`, `pending`, `waiting`, `in_progress` or `completed`; empty when
    /// GitHub sends none (the description allows `null`).
    pub status: String,
    /// Set once `completed`: `success`, `failure`, `cancelled`, `timed_out`, `startup_failure`,
    /// `action_required`, `neutral`, `skipped` or `stale`.
    pub conclusion: Option<String>,
    /// The run's `run-name` (the grading workflow sets it to the dispatch's `name` input), else
    /// the workflow's name.
    pub display_title: String,
    pub html_url: String,
    /// 1 for the first attempt, higher after a re-run of the same run.
    pub run_attempt: u32,
}
