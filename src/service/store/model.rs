//! The values the store reads and writes. Plain Rust: no database type appears here.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

/// Which database a [`Store`](super::Store) talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// An embedded SQLite file (the default): WAL, `synchronous=FULL`.
    Sqlite,
    /// A PostgreSQL server, for several service hosts sharing one queue.
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Store::info`](super::Store::info) reports, for the startup log and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    pub backend: Backend,
    /// The highest applied migration version.
    pub schema_version: i64,
    /// SQLite only: `PRAGMA journal_mode` (`wal` for a file).
    pub journal_mode: Option<String>,
    /// SQLite only: `PRAGMA synchronous` (2 = FULL).
    pub synchronous: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// deliveries

/// A webhook delivery as the server received it. `received_at` is set by the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    /// `X-GitHub-Delivery`.
    pub delivery_id: String,
    /// `X-GitHub-Event`.
    pub event: String,
    pub action: Option<String>,
    /// The raw request body, byte for byte.
    pub payload: Vec<u8>,
}

/// Whether [`Store::insert_delivery`](super::Store::insert_delivery) stored a new row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The delivery id was already stored (a redelivery): nothing changed.
    Duplicate,
}

/// A stored webhook delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub delivery_id: String,
    pub event: String,
    pub action: Option<String>,
    pub payload: Vec<u8>,
    pub received_at: DateTime<Utc>,
    pub processed_at: Option<DateTime<Utc>>,
    /// Why processing failed, when it did (the delivery is still marked processed).
    pub error: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// pull requests

/// What the webhook tells us about a pull request. Upserting it keeps the stored
/// `sticky_comment_id` and `grade_requested`, which have their own setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullUpsert {
    /// `owner/name`.
    pub repo: String,
    pub number: u64,
    pub head_sha: String,
    pub base_ref: String,
    pub task_id: Option<String>,
    pub is_agent: bool,
    pub author: String,
    pub installation_id: u64,
    pub draft: bool,
    pub open: bool,
}

/// A stored pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    pub repo: String,
    pub number: u64,
    pub head_sha: String,
    pub base_ref: String,
    pub task_id: Option<String>,
    pub is_agent: bool,
    pub author: String,
    pub installation_id: u64,
    pub draft: bool,
    pub open: bool,
    pub sticky_comment_id: Option<u64>,
    /// A maintainer asked `/infradev grade`.
    pub grade_requested: bool,
    pub updated_at: DateTime<Utc>,
}

// ---------------------------------------------------------------------------------------------
// jobs

/// A job id: the check run's `external_id`. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for JobId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(JobId)
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    Queued,
    /// Claimed by a worker whose lease runs until `lease_until`.
    Running,
    Finished,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 4] = [
        JobState::Queued,
        JobState::Running,
        JobState::Finished,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Queued or running.
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Queued | JobState::Running)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown job state {s:?}"))
    }
}

/// A grading job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    pub repo: String,
    pub number: u64,
    pub head_sha: String,
    pub task_id: String,
    pub installation_id: u64,
    pub state: JobState,
    /// How many times the job was claimed.
    pub attempts: u32,
    pub lease_owner: Option<String>,
    pub lease_until: Option<DateTime<Utc>>,
    pub check_run_id: Option<u64>,
    pub verdict: Option<String>,
    pub result_json: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `local` (this server's workers) or the remote backend grading it (`slurm`, …).
    pub backend: String,
    /// Dispatches to the remote backend so far; the current one is number `dispatches`.
    pub dispatches: u32,
    /// The engine's id of the current dispatch (Slurm job id, workflow run id).
    pub external_id: Option<String>,
    /// The current dispatch may still be alive in the engine.
    pub remote_open: bool,
    /// Remote runs that ended without a result.
    pub lost_runs: u32,
    /// Times the engine requeued the current dispatch by itself.
    pub remote_restarts: u32,
}

/// What [`Store::enqueue_job`](super::Store::enqueue_job) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The new job, or the active one that already existed for this (pull, head, task).
    pub job: Job,
    /// False when `job` already existed (queued or running): enqueueing is idempotent.
    pub created: bool,
    /// Active jobs of the same pull request for another head SHA, now cancelled. The caller
    /// reports them (check run `cancelled`).
    pub cancelled: Vec<Job>,
}

/// How many jobs are in each state (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub queued: u64,
    pub running: u64,
    pub finished: u64,
    pub cancelled: u64,
}

impl JobCounts {
    pub fn get(&self, state: JobState) -> u64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Running => self.running,
            JobState::Finished => self.finished,
            JobState::Cancelled => self.cancelled,
        }
    }

    pub(crate) fn set(&mut self, state: JobState, n: u64) {
        match state {
            JobState::Queued => self.queued = n,
            JobState::Running => self.running = n,
            JobState::Finished => self.finished = n,
            JobState::Cancelled => self.cancelled = n,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// outbox

/// An outbox row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutboxId(pub i64);

impl fmt::Display for OutboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A report to send. `kind` and `payload` mean whatever `app::outbox` says they mean.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOutbox {
    pub job_id: Option<JobId>,
    pub kind: String,
    pub payload: serde_json::Value,
}

/// Where an outbox row is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxState {
    Pending,
    Done,
    /// Given up on: a permanent error or too many attempts.
    Dead,
}

impl OutboxState {
    pub const ALL: [OutboxState; 3] = [OutboxState::Pending, OutboxState::Done, OutboxState::Dead];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Done => "done",
            OutboxState::Dead => "dead",
        }
    }
}

impl fmt::Display for OutboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OutboxState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OutboxState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown outbox state {s:?}"))
    }
}

/// A stored outbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub id: OutboxId,
    pub job_id: Option<JobId>,
    pub kind: String,
    pub payload: serde_json::Value,
    pub state: OutboxState,
    /// Delivery attempts made so far (retried, dead or done).
    pub attempts: u32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A result token of one dispatch (only its hash is stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobToken {
    pub job_id: JobId,
    pub dispatch: u32,
    pub expires_at: DateTime<Utc>,
    /// When a result was posted with it: a token is good for one result.
    pub used_at: Option<DateTime<Utc>>,
}

/// What became of a result posted to the result endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// It is the job's result: the job finished with it.
    Accepted,
    /// It reported an infrastructure fault: the job went back to the queue for a re-dispatch.
    Retried,
    /// Recorded only: the job was cancelled, superseded by a newer dispatch, or already done.
    Ignored,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Accepted => "accepted",
            Disposition::Retried => "retried",
            Disposition::Ignored => "ignored",
        }
    }
}

impl FromStr for Disposition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Disposition::Accepted,
            Disposition::Retried,
            Disposition::Ignored,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
        .ok_or_else(|| format!("unknown disposition {s:?}"))
    }
}

/// One result posted for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobResult {
    pub id: i64,
    pub job_id: JobId,
    pub dispatch: u32,
    pub disposition: Disposition,
    pub reason: Option<String>,
    /// The body as posted.
    pub body: String,
    pub received_at: DateTime<Utc>,
}

/// The lease owner of every dispatched job of remote backend `backend`: any server may finish
/// such a job when its result arrives.
pub fn remote_owner(backend: &str) -> String {
    format!("remote:{backend}")
}

// ---------------------------------------------------------------------------------------------
// refused deliveries and installations

/// Who saw that a delivery was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalSource {
    /// `POST /webhook` answered it with a 4xx (a signed payload it cannot read).
    Intake,
    /// GitHub's delivery log shows a 4xx answer (reconcile read it).
    GitHubLog,
}

impl RefusalSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalSource::Intake => "intake",
            RefusalSource::GitHubLog => "github_log",
        }
    }

    pub fn parse(s: &str) -> Option<RefusalSource> {
        match s {
            "intake" => Some(RefusalSource::Intake),
            "github_log" => Some(RefusalSource::GitHubLog),
            _ => None,
        }
    }
}

/// A delivery answered with a 4xx: never redelivered by reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedDelivery {
    /// `X-GitHub-Delivery`.
    pub delivery_id: String,
    /// `X-GitHub-Event`, when known.
    pub event: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
    pub reason: String,
    pub source: RefusalSource,
    /// Set by the store when recorded.
    pub refused_at: DateTime<Utc>,
}

// ---------------------------------------------------------------------------------------------
// grades (pages, dashboard, statistics)

/// A job with what its grade page and the statistics need besides the job itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GradedJob {
    pub job: Job,
    /// When the job finished (graded, or given up on); `None` while it has not.
    pub finished_at: Option<DateTime<Utc>>,
    /// The pull request's author when the job finished: the account the grade counts for.
    pub author: Option<String>,
}

/// How many jobs of one backend (`local`, `slurm`, …) are in each state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendCounts {
    pub backend: String,
    pub counts: JobCounts,
}
