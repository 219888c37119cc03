//! Scale-out backends: engines that already schedule GPUs (Slurm, self-hosted GitHub Actions
//! runners) and to which the server hands grades instead of running them itself.
//!
//! A backend only **submits, follows, cancels and collects**: the job record, cancellation on a
//! new push, infra retries and exactly-once reporting stay in the server (`app::remote`). The
//! result of a remote grade comes back through the server's result endpoint with a per-job token
//! (`app::results`); a backend's own view of the run ([`RemoteState`]) only tells the server
//! when a run ended without one.

pub mod github_actions;
pub mod route;
pub mod slurm;
pub mod token;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::grade::report::Report;
use crate::task::Resources;

pub use route::{BackendName, Route};

/// What an engine needs to place one grade: derived from the task's resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// GPUs on one node (0: a CPU-only grade).
    pub gpus: u32,
    /// Memory for the whole grade, in MB.
    pub memory_mb: u64,
    /// CPU cores.
    pub cpus: u32,
    /// Wall-clock limit for the whole grade (build + tests + probes + slack).
    pub time_limit: Duration,
    /// The task's labels (`gpu`, `h100`, `nvlink`, …): Slurm constraints, runner labels.
    pub labels: Vec<String>,
}

/// One dispatch of one job to an engine.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The server's job id (the check run's external_id).
    pub job_id: i64,
    /// 1 for the first dispatch, 2 for the re-dispatch after an infra event.
    pub dispatch: u32,
    pub task_id: String,
    /// The mirror repository the PR is on, `owner/name`.
    pub repo: String,
    pub number: u64,
    pub head_sha: String,
    pub placement: Placement,
    /// Where the run posts its result (`https://grader.example/jobs/42/result`).
    pub result_url: String,
}

impl Submission {
    /// The name the engine shows for this dispatch; also how a submission is found again
    /// after a crash between submitting and recording it.
    pub fn name(&self) -> String {
        format!("infradev-{}-{}", self.job_id, self.dispatch)
    }
}

/// How a run ended, as the engine tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The run finished on its own (its result should have arrived).
    Completed,
    /// The run's script failed (non-zero exit) or the workflow failed.
    Failed,
    /// Cancelled (by us, by an admin, by GitHub).
    Cancelled,
    /// The engine's time limit ended it.
    TimedOut,
    /// The node or runner was lost.
    NodeFail,
    /// Preempted by a higher-priority job, not requeued.
    Preempted,
    /// The engine could not start it (bad request after submission, startup failure).
    LaunchFailed,
}

/// The engine's view of one submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteState {
    /// Waiting for resources.
    Queued,
    Running {
        /// The node or runner, when the engine says.
        node: Option<String>,
    },
    /// Back in the engine's queue after a node failure or preemption; it will run again.
    /// `restarts` counts the runs lost so far.
    Requeued {
        restarts: u32,
        reason: String,
    },
    Ended {
        outcome: Outcome,
        detail: String,
    },
    /// The engine no longer knows this submission (purged, never recorded).
    Unknown,
}

/// A backend call failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Worth retrying later: the controller or API did not answer, timed out, rate-limited us.
    #[error("{0}")]
    Transient(String),
    /// The engine refused this submission (no such partition, more GPUs than any node has):
    /// retrying will not help; reported as an infra fault, never as the agent's.
    #[error("{0}")]
    Rejected(String),
}

impl Placement {
    /// What a task's grade asks of a machine: its GPUs, the larger of its memory and CPU limits
    /// (the phases run one after another), and the sum of its phase timeouts plus `slack`.
    pub fn for_task(resources: &Resources, slack: Duration) -> Placement {
        let t = &resources.timeouts;
        Placement {
            gpus: route::gpu_count(resources),
            memory_mb: resources.memory_mb,
            cpus: resources.cpus.ceil().max(1.0) as u32,
            time_limit: Duration::from_secs(t.build_s + t.tests_s + t.probes_s) + slack,
            labels: resources.labels.clone(),
        }
    }
}

/// What a remote run posts to the result endpoint: the report, or why the grade could not run
/// (`task error: …` or `infrastructure error: …`, as the local worker words them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultBody {
    pub job_id: i64,
    pub dispatch: u32,
    #[serde(default)]
    pub report: Option<Report>,
    #[serde(default)]
    pub error: Option<String>,
}

impl ResultBody {
    /// Why this result is our fault rather than the agent's, if it is: an infra verdict, or a
    /// grade that could not run for a reason other than the task itself.
    pub fn infra_fault(&self) -> Option<String> {
        match (&self.report, &self.error) {
            (Some(r), _) if r.grade.verdict == crate::grading::Verdict::Error => {
                Some(r.grade.reason.clone())
            }
            (Some(_), _) => None,
            (None, Some(e)) if e.starts_with("task error") => None,
            (None, Some(e)) => Some(e.clone()),
            (None, None) => Some("the result carries neither a report nor an error".into()),
        }
    }
}

/// A configured remote backend.
pub enum Remote {
    Slurm(slurm::Slurm),
    GitHubActions(github_actions::GitHubActions),
}

impl Remote {
    pub fn name(&self) -> BackendName {
        match self {
            Remote::Slurm(_) => BackendName::Slurm,
            Remote::GitHubActions(_) => BackendName::GitHubActions,
        }
    }

    /// Where this backend wants each dispatch's bundle (the task, its probes, the submission
    /// and the token) written, on a filesystem its nodes share; `None` when the run fetches
    /// what it needs itself (GitHub Actions: the grader repository holds the probes).
    pub fn bundle_dir(&self) -> Option<&std::path::Path> {
        match self {
            Remote::Slurm(s) => Some(s.config().bundle_dir.as_path()),
            Remote::GitHubActions(_) => None,
        }
    }

    /// Hands one dispatch to the engine; returns the engine's id for it. `bundle` is the
    /// dispatch's bundle (server path) when [`Remote::bundle_dir`] asked for one.
    pub async fn submit(
        &self,
        sub: &Submission,
        token: &secrecy::SecretString,
        bundle: Option<&std::path::Path>,
    ) -> Result<String, BackendError> {
        match self {
            Remote::Slurm(s) => {
                let bundle = bundle.ok_or_else(|| {
                    BackendError::Rejected("a Slurm dispatch needs its bundle".into())
                })?;
                s.submit(sub, &s.bundle_on_node(bundle)).await
            }
            Remote::GitHubActions(a) => a.submit(sub, token).await,
        }
    }

    /// The engine's id of the submission named [`Submission::name`], if it has one.
    pub async fn find(&self, name: &str) -> Result<Option<String>, BackendError> {
        match self {
            Remote::Slurm(s) => s.find(name).await,
            Remote::GitHubActions(a) => a.find(name).await,
        }
    }

    pub async fn state(&self, external_id: &str) -> Result<RemoteState, BackendError> {
        match self {
            Remote::Slurm(s) => s.state(external_id).await,
            Remote::GitHubActions(a) => a.state(external_id).await,
        }
    }

    /// Cancels a submission; one that already ended is not an error.
    pub async fn cancel(&self, external_id: &str) -> Result<(), BackendError> {
        match self {
            Remote::Slurm(s) => s.cancel(external_id).await,
            Remote::GitHubActions(a) => a.cancel(external_id).await,
        }
    }
}
