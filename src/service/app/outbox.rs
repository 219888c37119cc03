//! The durable outbox of GitHub writes. Every report (check-run changes, the sticky comment,
//! replies) is first committed as a row, in the same transaction as the state change it
//! reports, then delivered here with retries. Deliveries are idempotent — check runs are found
//! again by `external_id`, the sticky comment by its marker — so after retries and restarts
//! there is exactly one check run and one final conclusion per job, and one comment per PR.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use crate::grade::report::Report;
use crate::grade::report::github as render;
use crate::grading::Verdict;
use crate::service::config::OutboxConfig;
use crate::service::github::{
    Annotation, AnnotationLevel, CheckAction, CheckOutput, CheckRunCreate, CheckRunSummary,
    CheckRunUpdate, Conclusion, GitHubApp, GitHubError, RepoClient, Retry, RetryPolicy, Status,
    jitter,
};
use crate::service::store::{Job, JobId, JobState, NewOutbox, OutboxRow, Store};

/// One GitHub write to make. Stored as the row's kind and JSON payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Message {
    /// Create the job's check run as queued (or find it again by external id).
    CheckQueued {
        job_id: i64,
    },
    CheckInProgress {
        job_id: i64,
    },
    /// Complete the check run from the job's stored result.
    CheckCompleted {
        job_id: i64,
    },
    /// Write the job's result into the PR's sticky comment. A row of its own, after
    /// `CheckCompleted`, so that a failed comment never sends the conclusion twice.
    StickyComment {
        job_id: i64,
    },
    /// The job was cancelled (a newer push, the PR closed, `/infradev cancel`).
    CheckCancelled {
        job_id: i64,
        superseded_by: Option<String>,
    },
    /// The job's pull request no longer names its task (it names `task`, or none): its grade
    /// is superseded, and its check run is completed `cancelled` saying so.
    CheckTaskChanged {
        job_id: i64,
        task: Option<String>,
    },
    /// An agent PR that names no task: one neutral check saying how to name one.
    CheckNoTask {
        repo: String,
        installation_id: u64,
        number: u64,
        head_sha: String,
        known_tasks: Vec<String>,
    },
    /// A human's PR that names a task: one neutral check saying it waits for a maintainer's
    /// `/infradev grade`.
    CheckWaiting {
        repo: String,
        installation_id: u64,
        number: u64,
        head_sha: String,
    },
    /// A reaction to a comment (an accepted command).
    React {
        repo: String,
        installation_id: u64,
        comment_id: u64,
        content: String,
    },
    /// A short reply to a comment.
    Reply {
        repo: String,
        installation_id: u64,
        number: u64,
        body: String,
    },
}

impl Message {
    pub fn job_id(&self) -> Option<JobId> {
        match self {
            Message::CheckQueued { job_id }
            | Message::CheckInProgress { job_id }
            | Message::CheckCompleted { job_id }
            | Message::StickyComment { job_id }
            | Message::CheckCancelled { job_id, .. }
            | Message::CheckTaskChanged { job_id, .. } => Some(JobId(*job_id)),
            _ => None,
        }
    }

    /// The installation and repository a message not tied to a job is sent through.
    pub fn target(&self) -> Option<(u64, String)> {
        match self {
            Message::CheckNoTask {
                installation_id,
                repo,
                ..
            }
            | Message::CheckWaiting {
                installation_id,
                repo,
                ..
            }
            | Message::React {
                installation_id,
                repo,
                ..
            }
            | Message::Reply {
                installation_id,
                repo,
                ..
            } => Some((*installation_id, repo.clone())),
            _ => None,
        }
    }

    pub fn to_row(&self) -> NewOutbox {
        let payload = serde_json::to_value(self).unwrap_or_default();
        let kind = payload
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("unknown")
            .to_owned();
        NewOutbox {
            job_id: self.job_id(),
            kind,
            payload,
        }
    }
}

/// Delivers due outbox rows.
pub struct Outbox {
    pub store: Store,
    pub github: Arc<GitHubApp>,
    pub config: OutboxConfig,
    pub retry: RetryPolicy,
    /// `[web] public_url`: each job's check run links to `<public_url>/grades/<job id>`.
    pub public_url: Option<String>,
    /// Installations GitHub rate-limited, and until when: their rows wait as GitHub asked
    /// (`retry-after`, `x-ratelimit-reset`), the other installations' rows go on.
    pub paused: std::sync::Mutex<std::collections::BTreeMap<u64, std::time::Instant>>,
}

/// How one delivery attempt ended.
enum Attempt {
    Done,
    /// Never to be sent: the installation it would be sent through is gone (deleted or
    /// suspended), so GitHub would refuse its token.
    Withdrawn(String),
    /// Not yet possible (an earlier step of the same job is missing): try again soon.
    NotYet(String),
    /// Not tried: GitHub asked this installation's calls to wait.
    Paused,
    Failed(anyhow::Error, Retry),
}

impl Outbox {
    /// Delivers every due row once; returns how many were completed. Rows of one job are
    /// delivered in order: after a failure, the job's later rows wait for the next pass.
    pub async fn deliver_due(&self) -> anyhow::Result<usize> {
        let rows = self.store.due_outbox(Utc::now(), 100).await?;
        let mut blocked: Vec<JobId> = Vec::new();
        let mut done = 0;
        for row in rows {
            if row.job_id.is_some_and(|j| blocked.contains(&j)) {
                continue;
            }
            match self.attempt(&row).await {
                Attempt::Done => {
                    self.store.complete_outbox(row.id).await?;
                    done += 1;
                }
                Attempt::Paused => {
                    if let Some(job) = row.job_id {
                        blocked.push(job);
                    }
                }
                Attempt::Withdrawn(why) => {
                    tracing::info!(row = %row.id, kind = %row.kind, %why, "GitHub write withdrawn");
                    self.store.dead_outbox(row.id, &why).await?;
                }
                other => {
                    if let Some(job) = row.job_id {
                        blocked.push(job);
                    }
                    self.reschedule(&row, other).await?;
                }
            }
        }
        metrics::gauge!("infradev_outbox_pending")
            .set(self.store.pending_outbox_count().await? as f64);
        Ok(done)
    }

    async fn reschedule(&self, row: &OutboxRow, attempt: Attempt) -> anyhow::Result<()> {
        let attempts = row.attempts + 1;
        let (error, wait) = match attempt {
            Attempt::Done | Attempt::Withdrawn(_) | Attempt::Paused => return Ok(()),
            Attempt::NotYet(why) => (why, Some(self.backoff(0))),
            Attempt::Failed(e, Retry::After(d)) => (
                format!("{e:#}"),
                Some(jitter(d.max(self.backoff(attempts)))),
            ),
            Attempt::Failed(e, Retry::Never) => (format!("{e:#}"), None),
        };
        match wait {
            Some(wait) if attempts < self.config.max_attempts => {
                tracing::warn!(row = %row.id, kind = %row.kind, attempts, wait_ms = wait.as_millis() as u64, error = %error, "GitHub write failed; will retry");
                let next = Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default();
                self.store.retry_outbox(row.id, next, &error).await?;
            }
            _ => {
                tracing::error!(row = %row.id, kind = %row.kind, attempts, error = %error, "GitHub write given up");
                metrics::counter!("infradev_outbox_dead_total").increment(1);
                self.store.dead_outbox(row.id, &error).await?;
            }
        }
        Ok(())
    }

    fn backoff(&self, attempts: u32) -> Duration {
        let min = Duration::from_millis(self.config.min_backoff_ms);
        let raw = min.saturating_mul(1u32 << attempts.min(16));
        raw.min(Duration::from_secs(self.config.max_backoff_s))
    }

    async fn attempt(&self, row: &OutboxRow) -> Attempt {
        let message: Message = match serde_json::from_value(row.payload.clone()) {
            Ok(m) => m,
            Err(e) => {
                return Attempt::Failed(
                    anyhow::anyhow!("unreadable outbox row: {e}"),
                    Retry::Never,
                );
            }
        };
        let installation = match self.installation_of(&message).await {
            Ok(installation) => installation,
            Err(e) => return Attempt::Failed(e, Retry::After(self.backoff(row.attempts))),
        };
        if let Some(installation) = installation {
            match self.installation_gone(installation).await {
                Ok(Some(why)) => return Attempt::Withdrawn(why),
                Ok(None) => {}
                Err(e) => return Attempt::Failed(e, Retry::After(self.backoff(row.attempts))),
            }
            let paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
            if paused
                .get(&installation)
                .is_some_and(|until| *until > std::time::Instant::now())
            {
                return Attempt::Paused;
            }
        }
        match self.deliver(&message).await {
            Ok(Some(why)) => Attempt::NotYet(why),
            Ok(None) => Attempt::Done,
            Err(e) => {
                let github = e.downcast_ref::<GitHubError>();
                let retry = github.map_or(Retry::After(self.backoff(row.attempts)), |g| {
                    g.retry_with(&self.retry)
                });
                // A rate limit holds every call of the installation, not only this one.
                if let (Some(installation), Some(403 | 429), Retry::After(wait)) =
                    (installation, github.and_then(GitHubError::status), retry)
                {
                    self.paused
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(installation, std::time::Instant::now() + wait);
                }
                Attempt::Failed(e, retry)
            }
        }
    }

    /// The installation a message is sent through (`None` when its job is gone).
    async fn installation_of(&self, message: &Message) -> anyhow::Result<Option<u64>> {
        Ok(match message.target() {
            Some((installation_id, _)) => Some(installation_id),
            None => match message.job_id() {
                Some(id) => self.store.get_job(id).await?.map(|job| job.installation_id),
                None => None,
            },
        })
    }

    /// Why nothing may be sent through installation `installation_id`, when it was deleted or
    /// suspended: GitHub refuses its tokens, and nothing more may be posted through it.
    async fn installation_gone(&self, installation_id: u64) -> anyhow::Result<Option<String>> {
        Ok(
            (self.store.installation_active(installation_id).await? == Some(false)).then(|| {
                format!("installation {installation_id} was deleted or suspended: nothing is posted through it")
            }),
        )
    }

    /// Whether commit `head_sha` of `repo` has a grade that a new check run named
    /// [`render::CHECK_NAME`] would hide: a job of any pull request that grades it and was not
    /// cancelled (in the store), or such a job's check run on GitHub. GitHub's branch
    /// protection reads the newest check run of a name on a commit, whichever pull request
    /// it was posted for; a neutral one posted after a `failure` would read as passing.
    async fn commit_has_grade(
        &self,
        repo: &str,
        head_sha: &str,
        runs: &[CheckRunSummary],
    ) -> anyhow::Result<bool> {
        let jobs = self.store.jobs_for_head(repo, head_sha).await?;
        if jobs.iter().any(|j| j.state != JobState::Cancelled) {
            return Ok(true);
        }
        Ok(runs.iter().any(|r| {
            r.external_id
                .as_deref()
                .is_some_and(|e| e.parse::<i64>().is_ok_and(|id| id > 0))
                && r.conclusion.as_deref() != Some("cancelled")
        }))
    }

    /// Posts a completed neutral check run on `head_sha` (`external_id` says which kind and
    /// PR) unless one with that `external_id` exists, or the commit has a grade it would hide.
    async fn post_neutral(
        &self,
        repo: &str,
        installation_id: u64,
        head_sha: &str,
        external_id: String,
        output: render::CheckOutput,
    ) -> anyhow::Result<Option<String>> {
        let client = self.client(repo, installation_id).await?;
        let runs = client
            .check_runs_named(head_sha, render::CHECK_NAME)
            .await?;
        if runs
            .iter()
            .any(|r| r.external_id.as_deref() == Some(external_id.as_str()))
        {
            return Ok(None);
        }
        if self.commit_has_grade(repo, head_sha, &runs).await? {
            tracing::info!(%repo, %head_sha, %external_id, "not posted: the commit has a grade it would hide");
            return Ok(None);
        }
        let mut run = CheckRunCreate::queued(render::CHECK_NAME, head_sha);
        run.external_id = Some(external_id);
        run.status = Status::Completed;
        run.conclusion = Some(Conclusion::Neutral);
        run.completed_at = Some(Utc::now());
        run.output = Some(convert(output));
        client.create_check_run(&run).await?;
        Ok(None)
    }

    /// `Ok(Some(why))` when the message cannot be delivered yet.
    async fn deliver(&self, message: &Message) -> anyhow::Result<Option<String>> {
        match message {
            Message::CheckQueued { job_id } => {
                let job = self.job(*job_id).await?;
                if job.check_run_id.is_some() {
                    return Ok(None);
                }
                let client = self.client(&job.repo, job.installation_id).await?;
                let external_id = job.id.to_string();
                let found = client
                    .find_check_run_by_external_id(&job.head_sha, render::CHECK_NAME, &external_id)
                    .await?;
                let id = match found {
                    Some(id) => id,
                    None => {
                        let mut run = CheckRunCreate::queued(render::CHECK_NAME, &job.head_sha);
                        run.external_id = Some(external_id);
                        run.details_url = self
                            .public_url
                            .as_ref()
                            .map(|u| format!("{u}/grades/{}", job.id));
                        run.output = Some(convert(render::queued_output()));
                        client.create_check_run(&run).await?
                    }
                };
                self.store.set_check_run_id(job.id, id).await?;
                Ok(None)
            }
            Message::CheckInProgress { job_id } => {
                let job = self.job(*job_id).await?;
                let Some(check) = job.check_run_id else {
                    return Ok(Some("the check run is not created yet".into()));
                };
                let update = CheckRunUpdate {
                    status: Some(Status::InProgress),
                    started_at: Some(Utc::now()),
                    output: Some(convert(render::in_progress_output())),
                    ..Default::default()
                };
                self.client(&job.repo, job.installation_id)
                    .await?
                    .update_check_run(check, &update)
                    .await?;
                Ok(None)
            }
            Message::CheckCompleted { job_id } => {
                let job = self.job(*job_id).await?;
                let Some(check) = job.check_run_id else {
                    return Ok(Some("the check run is not created yet".into()));
                };
                let (conclusion, output, _) = completed_output(&job)?;
                let update = CheckRunUpdate {
                    conclusion: Some(conclusion),
                    completed_at: Some(Utc::now()),
                    output: Some(output),
                    actions: Some(vec![regrade_action()]),
                    ..Default::default()
                };
                self.client(&job.repo, job.installation_id)
                    .await?
                    .update_check_run(check, &update)
                    .await?;
                Ok(None)
            }
            Message::StickyComment { job_id } => {
                let job = self.job(*job_id).await?;
                // The comment describes the pull request as it is: a grade of a head or task
                // it has moved away from (finished just before the move) is not written.
                if let Some(pull) = self.store.get_pull(&job.repo, job.number).await?
                    && (pull.head_sha != job.head_sha
                        || pull.task_id.as_deref() != Some(job.task_id.as_str()))
                {
                    tracing::info!(job = %job.id, "sticky comment not written: the pull request moved on");
                    return Ok(None);
                }
                let (_, _, report) = completed_output(&job)?;
                let body =
                    render::sticky_comment(&job.head_sha, report.as_ref(), &status_line(&job), &[]);
                let client = self.client(&job.repo, job.installation_id).await?;
                self.upsert_sticky(&client, &job.repo, job.number, &body)
                    .await?;
                Ok(None)
            }
            Message::CheckCancelled {
                job_id,
                superseded_by,
            } => {
                let job = self.job(*job_id).await?;
                let Some(check) = job.check_run_id else {
                    return Ok(None);
                }; // Never shown: nothing to cancel.
                let update = CheckRunUpdate {
                    conclusion: Some(Conclusion::Cancelled),
                    completed_at: Some(Utc::now()),
                    output: Some(convert(match superseded_by {
                        Some(sha) => render::cancelled_output(sha),
                        None => render::withdrawn_output(),
                    })),
                    ..Default::default()
                };
                self.client(&job.repo, job.installation_id)
                    .await?
                    .update_check_run(check, &update)
                    .await?;
                Ok(None)
            }
            Message::CheckTaskChanged { job_id, task } => {
                let job = self.job(*job_id).await?;
                let Some(check) = job.check_run_id else {
                    return Ok(None);
                }; // Never shown: nothing to cancel.
                let update = CheckRunUpdate {
                    conclusion: Some(Conclusion::Cancelled),
                    completed_at: Some(Utc::now()),
                    output: Some(convert(render::task_changed_output(
                        &job.task_id,
                        task.as_deref(),
                    ))),
                    ..Default::default()
                };
                self.client(&job.repo, job.installation_id)
                    .await?
                    .update_check_run(check, &update)
                    .await?;
                Ok(None)
            }
            Message::CheckNoTask {
                repo,
                installation_id,
                number,
                head_sha,
                known_tasks,
            } => {
                let known: Vec<&str> = known_tasks.iter().map(String::as_str).collect();
                self.post_neutral(
                    repo,
                    *installation_id,
                    head_sha,
                    format!("no-task:{number}"),
                    render::no_task_output(*number, &known),
                )
                .await
            }
            Message::Reply {
                repo,
                installation_id,
                number,
                body,
            } => {
                self.client(repo, *installation_id)
                    .await?
                    .create_comment(*number, body)
                    .await?;
                Ok(None)
            }
            Message::CheckWaiting {
                repo,
                installation_id,
                number,
                head_sha,
            } => {
                self.post_neutral(
                    repo,
                    *installation_id,
                    head_sha,
                    format!("waiting:{number}"),
                    render::waiting_output(*number),
                )
                .await
            }
            Message::React {
                repo,
                installation_id,
                comment_id,
                content,
            } => {
                self.client(repo, *installation_id)
                    .await?
                    .react_to_comment(*comment_id, content)
                    .await?;
                Ok(None)
            }
        }
    }

    async fn upsert_sticky(
        &self,
        client: &RepoClient,
        repo: &str,
        number: u64,
        body: &str,
    ) -> anyhow::Result<()> {
        let known = self
            .store
            .get_pull(repo, number)
            .await?
            .and_then(|p| p.sticky_comment_id);
        let existing = match known {
            Some(id) => Some(id),
            None => {
                client
                    .find_comment_with_marker(number, render::STICKY_MARKER)
                    .await?
            }
        };
        let id = match existing {
            Some(id) => match client.update_comment(id, body).await {
                Ok(()) => id,
                // Deleted by someone: post it again.
                Err(e) if e.is_not_found() => client.create_comment(number, body).await?,
                Err(e) => return Err(e.into()),
            },
            None => client.create_comment(number, body).await?,
        };
        self.store
            .set_sticky_comment_id(repo, number, Some(id))
            .await?;
        Ok(())
    }

    async fn job(&self, id: i64) -> anyhow::Result<Job> {
        self.store
            .get_job(JobId(id))
            .await?
            .with_context(|| format!("job {id} is not in the store"))
    }

    async fn client(&self, repo: &str, installation_id: u64) -> anyhow::Result<RepoClient> {
        let (owner, name) = repo
            .split_once('/')
            .with_context(|| format!("`{repo}` is not owner/name"))?;
        Ok(self.github.client(installation_id, owner, name).await?)
    }
}

fn regrade_action() -> CheckAction {
    CheckAction {
        label: "Re-grade".into(),
        description: "Grade this head again".into(),
        identifier: render::REGRADE_ACTION.into(),
    }
}

fn status_line(job: &Job) -> String {
    match job.verdict.as_deref() {
        Some(v) => format!(
            "graded head {} ({v})",
            &job.head_sha[..job.head_sha.len().min(12)]
        ),
        None => format!("head {}", &job.head_sha[..job.head_sha.len().min(12)]),
    }
}

/// The completed check of a finished job: from its report, or, when the grade could not run,
/// a neutral infra check with the reason (never blamed on the agent).
fn completed_output(job: &Job) -> anyhow::Result<(Conclusion, CheckOutput, Option<Report>)> {
    if let Some(json) = &job.result_json {
        let report: Report =
            serde_json::from_str(json).context("the stored report is unreadable")?;
        let conclusion = match report.grade.verdict {
            Verdict::Resolved => Conclusion::Success,
            Verdict::Unresolved | Verdict::Tampered => Conclusion::Failure,
            Verdict::Error => Conclusion::Neutral,
        };
        return Ok((
            conclusion,
            convert(render::with_commands(render::check_run_output(&report))),
            Some(report),
        ));
    }
    // The error (git's output, the grader's paths) is for operators: the check says which
    // kind of fault it was, in fixed words.
    let fault = render::GradeFault::of_error(job.error.as_deref().unwrap_or_default());
    Ok((
        Conclusion::Neutral,
        convert(render::with_commands(render::infra_output(fault))),
        None,
    ))
}

/// From the renderer's plain output to the client's request type.
pub(crate) fn convert(output: render::CheckOutput) -> CheckOutput {
    CheckOutput {
        title: output.title,
        summary: output.summary,
        text: output.text,
        annotations: output
            .annotations
            .into_iter()
            .map(|a| Annotation {
                path: a.path,
                start_line: a.start_line,
                end_line: a.end_line,
                level: match a.level {
                    render::AnnotationLevel::Notice => AnnotationLevel::Notice,
                    render::AnnotationLevel::Warning => AnnotationLevel::Warning,
                    render::AnnotationLevel::Failure => AnnotationLevel::Failure,
                },
                message: a.message,
                title: Some(a.title).filter(|t| !t.is_empty()),
            })
            .collect(),
    }
}
