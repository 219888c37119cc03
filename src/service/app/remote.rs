//! Grades handed to a remote engine (Slurm, GitHub Actions). The server keeps everything that
//! must be exactly once: the job record, the dispatch number and its token, cancellation on a
//! new push, the infra retry (one re-dispatch after a lost run, then a neutral check) and the
//! reports. The engine only runs the grade; the run posts its result to `/jobs/{id}/result`
//! (`app::results`).
//!
//! Two loops per backend:
//! - the **dispatcher** claims queued jobs routed to the backend, mints the dispatch's token,
//!   writes its bundle when the engine needs one, submits, and records the engine's id;
//! - the **follower** reads the engine's view of every open dispatch: a requeue by the engine
//!   is noted (infra, never the agent's), a run that ended without a result is lost (re-dispatch
//!   once, then neutral), a run past its deadline is cancelled and lost, and the run of a
//!   cancelled job is cancelled in the engine.
//!
//! A crash between submitting and recording the engine's id is healed by the follower, which
//! finds the submission again by its name (`infradev-<job>-<dispatch>`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use tokio::sync::Notify;

use super::bundle;
use super::mirror::Mirrors;
use super::outbox::Message;
use super::results::MAX_LOST_RUNS;
use super::worker::fetch_submission;
use crate::service::backend::{BackendError, Placement, Remote, RemoteState, Submission, token};
use crate::service::github::GitHubApp;
use crate::service::store::{Job, JobState, Store, remote_owner};
use crate::task::Registry;

/// Submission failures (engine unreachable) before a job is reported neutral: with
/// [`submit_backoff`], about half an hour of outage.
const MAX_SUBMIT_ATTEMPTS: u32 = 10;

/// How long a job waits after its `attempt`th failed submission: 5 s doubling, at most 5 min.
fn submit_backoff(attempt: u32) -> Duration {
    let secs = 5u64.saturating_mul(1 << attempt.saturating_sub(1).min(6));
    Duration::from_secs(secs.min(300))
}
/// How long a claimed dispatch may go without an engine id before the follower looks for it.
const SUBMIT_GRACE: Duration = Duration::from_secs(120);

/// What every loop of one backend shares.
pub struct RemoteBackend {
    pub remote: Remote,
    pub store: Store,
    pub github: Arc<GitHubApp>,
    pub mirrors: Arc<Mirrors>,
    /// tasks/, probes/ and runners/.
    pub root: PathBuf,
    pub web_url: String,
    /// The server's URL as the runs reach it; results go to `<base>/jobs/<id>/result`.
    pub result_base_url: String,
    /// How long a dispatch may wait in the engine's queue before it counts as lost.
    pub queue_timeout: Duration,
    /// How long after the engine says a run ended its result may still arrive.
    pub result_grace: Duration,
    pub wake_outbox: Arc<Notify>,
    pub wake_dispatch: Arc<Notify>,
    /// When the follower first saw each dispatch ended, to give its result `result_grace`.
    ended_seen: Mutex<HashMap<(i64, u32), Instant>>,
}

impl RemoteBackend {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        remote: Remote,
        store: Store,
        github: Arc<GitHubApp>,
        mirrors: Arc<Mirrors>,
        root: PathBuf,
        web_url: String,
        result_base_url: String,
        queue_timeout: Duration,
        result_grace: Duration,
        wake_outbox: Arc<Notify>,
        wake_dispatch: Arc<Notify>,
    ) -> RemoteBackend {
        RemoteBackend {
            remote,
            store,
            github,
            mirrors,
            root,
            web_url,
            result_base_url: result_base_url.trim_end_matches('/').to_owned(),
            queue_timeout,
            result_grace,
            wake_outbox,
            wake_dispatch,
            ended_seen: Mutex::new(HashMap::new()),
        }
    }

    fn name(&self) -> &'static str {
        self.remote.name().as_str()
    }

    fn owner(&self) -> String {
        remote_owner(self.name())
    }

    /// Claims and dispatches one queued job; returns whether there was one and the engine
    /// took it (a refusal or an unreachable engine stops the drain until the next tick).
    pub async fn dispatch_once(&self) -> anyhow::Result<bool> {
        // Until the submission is recorded (with its own deadline), the queue timeout is the
        // backstop: a dispatch found again after a crash is not cut short.
        let window = chrono::Duration::from_std(self.queue_timeout).context("queue timeout")?;
        let Some(job) = self
            .store
            .claim_dispatch(self.name(), Utc::now() + window)
            .await?
        else {
            return Ok(false);
        };
        let dispatch = job.dispatches;
        let span = tracing::info_span!("dispatch", backend = self.name(), job = %job.id, dispatch, head = %job.head_sha);
        let _guard = span.enter();
        let started = Instant::now();

        let task = match Registry::resolve(&self.root, &job.task_id, None) {
            Ok(task) => task,
            Err(e) => {
                self.fail(&job, &format!("task error: {e}")).await?;
                return Ok(true);
            }
        };
        let placement = Placement::for_task(&task.resources, Duration::ZERO);
        let deadline = Utc::now()
            + chrono::Duration::from_std(self.queue_timeout + placement.time_limit * 2)
                .context("deadline out of range")?;
        let secret = token::mint();
        self.store
            .insert_job_token(job.id, dispatch, &token::hash_secret(&secret), deadline)
            .await?;
        let sub = Submission {
            job_id: job.id.0,
            dispatch,
            task_id: job.task_id.clone(),
            repo: job.repo.clone(),
            number: job.number,
            head_sha: job.head_sha.clone(),
            placement,
            result_url: format!("{}/jobs/{}/result", self.result_base_url, job.id.0),
        };

        let bundle = match self.remote.bundle_dir() {
            None => None,
            Some(dir) => {
                let path = bundle::path(dir, job.id.0, dispatch);
                let written = async {
                    let mirror = fetch_submission(
                        &self.github,
                        &self.mirrors,
                        &self.web_url,
                        &job,
                        &task.base_commit,
                        &task.reference_commit,
                    )
                    .await?;
                    let (path, root, task, head, secret) = (
                        path.clone(),
                        self.root.clone(),
                        task.clone(),
                        job.head_sha.clone(),
                        secret.clone(),
                    );
                    tokio::task::spawn_blocking(move || {
                        bundle::write(&path, &root, &task, &mirror, &head, &secret)
                    })
                    .await
                    .context("the bundle task panicked")?
                }
                .await;
                if let Err(e) = written {
                    let error = BackendError::Transient(format!(
                        "cannot prepare the grade's bundle: {e:#}"
                    ));
                    self.submit_failed(&job, &error).await?;
                    return Ok(false);
                }
                Some(path)
            }
        };

        match self.remote.submit(&sub, &secret, bundle.as_deref()).await {
            Ok(external_id) => {
                let recorded = self
                    .store
                    .set_external_id(job.id, dispatch, &external_id, deadline)
                    .await?;
                metrics::histogram!("infradev_remote_submit_seconds", "backend" => self.name())
                    .record(started.elapsed().as_secs_f64());
                tracing::info!(%external_id, "submitted");
                if recorded.is_some_and(|j| j.state == JobState::Running) {
                    self.store
                        .push_outbox(&Message::CheckInProgress { job_id: job.id.0 }.to_row())
                        .await?;
                    self.wake_outbox.notify_one();
                }
                Ok(true)
            }
            Err(e) => {
                if let Some(path) = &bundle {
                    bundle::remove(path).ok();
                }
                self.submit_failed(&job, &e).await?;
                Ok(false)
            }
        }
    }

    async fn submit_failed(&self, job: &Job, error: &BackendError) -> anyhow::Result<()> {
        let name = self.name();
        match error {
            BackendError::Rejected(msg) => {
                tracing::warn!(%msg, "the engine refused the grade");
                self.fail(
                    job,
                    &format!("infrastructure error: the {name} backend refused the grade: {msg}"),
                )
                .await
            }
            BackendError::Transient(msg) if job.attempts >= MAX_SUBMIT_ATTEMPTS => self
                .fail(
                    job,
                    &format!(
                        "infrastructure error: could not submit to the {name} backend after {} attempts: {msg}",
                        job.attempts
                    ),
                )
                .await,
            BackendError::Transient(msg) => {
                let wait = submit_backoff(job.attempts);
                tracing::warn!(%msg, attempt = job.attempts, ?wait, "cannot submit now; the job goes back to the queue");
                let not_before = Utc::now() + chrono::Duration::from_std(wait).expect("small");
                self.store
                    .requeue_remote(job.id, job.dispatches, false, msg, Some(not_before))
                    .await?;
                Ok(())
            }
        }
    }

    /// Ends a job as our fault (a neutral check), with its reports, in one transaction.
    async fn fail(&self, job: &Job, error: &str) -> anyhow::Result<()> {
        let mut tx = self.store.begin().await?;
        if tx.fail_job(job.id, &self.owner(), error).await? {
            tx.close_remote(job.id, job.dispatches).await?;
            tx.push_outbox(&Message::CheckCompleted { job_id: job.id.0 }.to_row())
                .await?;
            tx.push_outbox(&Message::StickyComment { job_id: job.id.0 }.to_row())
                .await?;
        }
        tx.commit().await?;
        self.wake_outbox.notify_one();
        self.remove_bundle(job);
        Ok(())
    }

    fn remove_bundle(&self, job: &Job) {
        if let Some(dir) = self.remote.bundle_dir() {
            let path = bundle::path(dir, job.id.0, job.dispatches);
            if let Err(e) = bundle::remove(&path) {
                tracing::warn!(error = %format!("{e:#}"), "cannot remove a bundle");
            }
        }
    }

    /// One pass over every open dispatch of this backend.
    pub async fn follow_once(&self) -> anyhow::Result<()> {
        let open = self.store.open_remote_jobs(self.name()).await?;
        // Forget dispatches that closed (their result arrived within the grace).
        self.ended_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, dispatch), _| {
                open.iter()
                    .any(|j| j.id.0 == *id && j.dispatches == *dispatch)
            });
        for job in open {
            let span = tracing::info_span!("follow", backend = self.name(), job = %job.id, dispatch = job.dispatches);
            let _guard = span.enter();
            if let Err(e) = self.follow(&job).await {
                tracing::warn!(error = %format!("{e:#}"), "cannot follow a dispatch now");
            }
        }
        Ok(())
    }

    async fn follow(&self, job: &Job) -> anyhow::Result<()> {
        let dispatch = job.dispatches;
        let name = format!("infradev-{}-{dispatch}", job.id.0);
        let external_id = match &job.external_id {
            Some(id) => Some(id.clone()),
            // Claimed but not (yet) recorded: the dispatcher may still be submitting, or died
            // after the engine took it.
            None if Utc::now() - job.updated_at
                < chrono::Duration::from_std(SUBMIT_GRACE).expect("small") =>
            {
                return Ok(());
            }
            None => {
                let found = self.remote.find(&name).await?;
                if let Some(id) = &found {
                    tracing::info!(external_id = %id, "found a submission that was not recorded");
                    let deadline = job.lease_until.unwrap_or_else(Utc::now);
                    self.store
                        .set_external_id(job.id, dispatch, id, deadline)
                        .await?;
                }
                found
            }
        };

        if job.state != JobState::Running {
            // Cancelled (a newer push, the PR closed) or finished: stop the run in the engine.
            if let Some(id) = &external_id {
                if job.state == JobState::Cancelled {
                    self.remote.cancel(id).await?;
                    tracing::info!(external_id = %id, "cancelled in the engine");
                    metrics::counter!("infradev_remote_cancelled", "backend" => self.name())
                        .increment(1);
                }
            } else if job.state == JobState::Cancelled
                && Utc::now() - job.updated_at
                    < chrono::Duration::from_std(SUBMIT_GRACE).expect("small")
            {
                return Ok(()); // it may still be submitted: look again
            }
            self.store.close_remote(job.id, dispatch).await?;
            self.remove_bundle(job);
            return Ok(());
        }

        let Some(external_id) = external_id else {
            return self
                .lost(job, "the dispatch never reached the engine")
                .await;
        };
        let past_deadline = job.lease_until.is_some_and(|d| d < Utc::now());
        match self.remote.state(&external_id).await? {
            RemoteState::Queued | RemoteState::Running { .. } if past_deadline => {
                self.remote.cancel(&external_id).await?;
                self.lost(
                    job,
                    &format!(
                        "{} {external_id} ran past its deadline and was cancelled",
                        self.name()
                    ),
                )
                .await
            }
            RemoteState::Queued | RemoteState::Running { .. } => Ok(()),
            RemoteState::Requeued { restarts, reason } => {
                if self
                    .store
                    .note_remote_restarts(job.id, dispatch, restarts)
                    .await?
                {
                    // The engine reruns it by itself; the rerun posts with the same token.
                    tracing::warn!(%external_id, restarts, %reason, "the engine requeued the grade (infrastructure, not the agent)");
                    metrics::counter!("infradev_remote_requeues", "backend" => self.name())
                        .increment(1);
                }
                Ok(())
            }
            RemoteState::Ended { detail, .. } => self.ended(job, &detail).await,
            RemoteState::Unknown => {
                self.ended(
                    job,
                    &format!("{} no longer knows {external_id}", self.name()),
                )
                .await
            }
        }
    }

    /// The run ended; its result had `result_grace` to arrive (an accepted result would have
    /// closed the dispatch), so it is lost.
    async fn ended(&self, job: &Job, detail: &str) -> anyhow::Result<()> {
        let key = (job.id.0, job.dispatches);
        let first_seen = *self
            .ended_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_insert_with(Instant::now);
        if first_seen.elapsed() < self.result_grace {
            return Ok(());
        }
        self.ended_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.lost(job, &format!("{detail}, without a result")).await
    }

    /// A run ended without a result: dispatch once more, or report neutral.
    async fn lost(&self, job: &Job, why: &str) -> anyhow::Result<()> {
        metrics::counter!("infradev_remote_lost_runs", "backend" => self.name()).increment(1);
        self.remove_bundle(job);
        if job.lost_runs < MAX_LOST_RUNS {
            tracing::warn!(%why, "run lost (infrastructure): dispatching again");
            if self
                .store
                .requeue_remote(job.id, job.dispatches, true, why, None)
                .await?
                .is_some()
            {
                self.wake_dispatch.notify_one();
            }
            Ok(())
        } else {
            tracing::warn!(%why, "run lost again (infrastructure): reporting neutral");
            self.store.count_lost_run(job.id, job.dispatches).await?;
            self.fail(
                job,
                &format!(
                    "infrastructure error: the {} backend lost the grade twice; last: {why}",
                    self.name()
                ),
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submissions_back_off_to_five_minutes() {
        let waits: Vec<u64> = (1..=MAX_SUBMIT_ATTEMPTS)
            .map(|a| submit_backoff(a).as_secs())
            .collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]);
        assert!(
            waits.iter().sum::<u64>() > 25 * 60,
            "rides out a long outage"
        );
    }
}
