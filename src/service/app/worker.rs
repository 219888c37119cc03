//! Grades claimed jobs: fetch the PR head into a local mirror with the installation token, run
//! the one grading flow (`grade::grade_submission`) in the sandbox, and commit the result with
//! the reports to send, atomically. The lease is renewed while the grade runs; a worker that
//! dies lets its lease lapse and another (or the restarted server) resumes the job.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Notify;

use super::drain::Drain;
use super::mirror::Mirrors;
use super::outbox::Message;
use crate::grade::report::Report;
use crate::grade::report::github::GradeFault;
use crate::grade::{ExecutorChoice, GradeError, GradeRequest, grade_submission};
use crate::service::github::GitHubApp;
use crate::service::store::{Job, Store};
use crate::task::Registry;

/// How often a running grade checks that its job is still wanted (and renews its lease).
const CANCEL_CHECK: Duration = Duration::from_secs(5);

/// Claims of one job before an infrastructure fault is reported instead of retried.
const INFRA_ATTEMPTS: u32 = 2;

/// Why a grade failed on our side (Docker, a lost fetch), if it did: such a grade is retried.
fn infra_fault(graded: &Result<Report, String>) -> Option<String> {
    match graded {
        Ok(report) if report.grade.verdict == crate::grading::Verdict::Error => {
            Some(report.grade.reason.clone())
        }
        Ok(_) => None,
        Err(e) if GradeFault::of_error(e) == GradeFault::Task => None,
        Err(e) => Some(e.clone()),
    }
}

/// What a job's grade is no longer, for the pull request.
#[derive(Debug)]
enum Superseded {
    /// The PR's head is now this commit.
    Head(String),
    /// The PR names this task now, or none.
    Task(Option<String>),
}

pub struct Worker {
    pub store: Store,
    pub github: Arc<GitHubApp>,
    pub mirrors: Arc<Mirrors>,
    /// tasks/, probes/ and runners/.
    pub root: PathBuf,
    /// The web URL repositories are cloned from (`https://github.com/`).
    pub web_url: String,
    pub executor: ExecutorChoice,
    /// Reruns of a failing test or probe unless the task sets its own (`[worker] retries`).
    pub retries: u32,
    /// What a grade does with a task that is not what was validated (`[worker] allow_unvalidated`).
    pub unvalidated: crate::grade::Unvalidated,
    pub lease: Duration,
    /// This worker's lease owner name (host, process, slot).
    pub owner: String,
    pub wake_outbox: Arc<Notify>,
    /// Whether the server is stopping (claim nothing, hand running jobs back past the grace).
    pub drain: Drain,
}

impl Worker {
    /// Claims and grades one job; returns whether there was one (never while stopping).
    pub async fn run_once(&self) -> anyhow::Result<bool> {
        if self.drain.stopping() {
            return Ok(false);
        }
        let Some(job) = self.store.claim_job(&self.owner, self.lease).await? else {
            return Ok(false);
        };
        let span = tracing::info_span!("job", id = %job.id, repo = %job.repo, pr = job.number, head = %job.head_sha);
        let _guard = span.enter();
        if let Some(superseded) = self.superseded(&job).await? {
            // A push we never heard of (or heard of late), or a task the PR no longer names.
            self.cancel_superseded(&job, superseded).await?;
            return Ok(true);
        }
        // Only while the job is still ours and wanted: a job cancelled meanwhile (superseded,
        // the App's access removed) says nothing more.
        let mut tx = self.store.begin().await?;
        if !tx.renew_lease(job.id, &self.owner, self.lease).await? {
            tracing::info!("cancelled before the grade started");
            return Ok(true);
        }
        tx.push_outbox(&Message::CheckInProgress { job_id: job.id.0 }.to_row())
            .await?;
        tx.commit().await?;
        self.wake_outbox.notify_one();

        let graded = {
            let grade = self.grade(&job);
            tokio::pin!(grade);
            // Renewing also tells whether the job was cancelled (a newer push, the PR closed):
            // often enough that a superseded grade stops within seconds, not a lease third.
            let mut renew = tokio::time::interval((self.lease / 3).min(CANCEL_CHECK));
            renew.tick().await;
            loop {
                tokio::select! {
                    result = &mut grade => break result,
                    _ = self.drain.hand_back() => {
                        // The server is stopping and the grace is over: the job goes back to
                        // the queue untouched, for the next start or another server.
                        if self.store.hand_back_job(job.id, &self.owner).await? {
                            self.drain.note_requeued();
                            tracing::info!("server stopping: the job goes back to the queue");
                        }
                        return Ok(false);
                    }
                    _ = renew.tick() => {
                        if !self.store.renew_lease(job.id, &self.owner, self.lease).await.unwrap_or(false) {
                            // Returning drops the grade: its sandboxes are removed at once.
                            tracing::info!("lease lost or job cancelled: abandoning the grade");
                            return Ok(true);
                        }
                    }
                }
            }
        };
        // A job cancelled while its grade ran (a push, the PR closed, the App removed) is not
        // posted, and nothing is asked of GitHub for it (a removed installation's token is dead).
        if !self
            .store
            .renew_lease(job.id, &self.owner, self.lease)
            .await
            .unwrap_or(false)
        {
            tracing::info!("job cancelled while it graded: not posted");
            return Ok(true);
        }
        // The grade is posted only while it is still the pull request's: a push that happened
        // while it ran (and that the processor has not heard of yet) supersedes it.
        if let Ok(Some(head)) = self.head_moved(&job).await {
            self.cancel_superseded(&job, Superseded::Head(head)).await?;
            return Ok(true);
        }
        if let Some(fault) = infra_fault(&graded)
            && job.attempts < INFRA_ATTEMPTS
            && self
                .store
                .release_job(job.id, &self.owner, Some(&fault))
                .await?
        {
            // Ours, not the agent's: try once more before reporting a neutral check.
            tracing::warn!(%fault, attempt = job.attempts, "infrastructure fault: the job goes back to the queue");
            return Ok(true);
        }
        let mut tx = self.store.begin().await?;
        let applied = match &graded {
            Ok(report) => {
                let verdict = format!("{:?}", report.grade.verdict).to_lowercase();
                let json = serde_json::to_string(report)?;
                tx.finish_job(job.id, &self.owner, &verdict, &json).await?
            }
            Err(error) => tx.fail_job(job.id, &self.owner, error).await?,
        };
        if applied {
            tx.push_outbox(&Message::CheckCompleted { job_id: job.id.0 }.to_row())
                .await?;
            tx.push_outbox(&Message::StickyComment { job_id: job.id.0 }.to_row())
                .await?;
        }
        tx.commit().await?;
        self.wake_outbox.notify_one();
        if applied {
            self.drain.note_finished();
        }
        match graded {
            Ok(report) => tracing::info!(verdict = ?report.grade.verdict, applied, "graded"),
            Err(error) => tracing::warn!(%error, applied, "the grade could not run"),
        }
        Ok(true)
    }

    /// What supersedes the job, if anything: the PR's head as the API has it now, or the task
    /// the PR names in the store (which follows every `pull_request` event).
    async fn superseded(&self, job: &Job) -> anyhow::Result<Option<Superseded>> {
        if let Some(pull) = self.store.get_pull(&job.repo, job.number).await?
            && pull.head_sha == job.head_sha
            && pull.task_id.as_deref() != Some(job.task_id.as_str())
        {
            return Ok(Some(Superseded::Task(pull.task_id)));
        }
        Ok(self
            .head_moved(job)
            .await
            .ok()
            .flatten()
            .map(Superseded::Head))
    }

    /// The PR's head, when it is no longer the job's (read from the API; an error when it
    /// cannot be read: the fetch then reports why).
    async fn head_moved(&self, job: &Job) -> anyhow::Result<Option<String>> {
        let (owner, name) = job
            .repo
            .split_once('/')
            .context("repository is not owner/name")?;
        let client = self.github.client(job.installation_id, owner, name).await?;
        let pull = client.pull_request(job.number).await?;
        Ok((pull.head_sha != job.head_sha).then_some(pull.head_sha))
    }

    /// Cancels a superseded job and completes its check run `cancelled`, saying why.
    async fn cancel_superseded(&self, job: &Job, superseded: Superseded) -> anyhow::Result<()> {
        let mut tx = self.store.begin().await?;
        if tx.cancel_job(job.id).await?.is_some() {
            let message = match &superseded {
                Superseded::Head(head) => Message::CheckCancelled {
                    job_id: job.id.0,
                    superseded_by: Some(head.clone()),
                },
                Superseded::Task(task) => Message::CheckTaskChanged {
                    job_id: job.id.0,
                    task: task.clone(),
                },
            };
            tx.push_outbox(&message.to_row()).await?;
        }
        tx.commit().await?;
        self.wake_outbox.notify_one();
        tracing::info!(?superseded, "superseded: the pull request moved on");
        Ok(())
    }

    /// The report, or why the grade could not run (reported as a neutral infra check).
    async fn grade(&self, job: &Job) -> Result<Report, String> {
        let task = Registry::resolve(&self.root, &job.task_id, None)
            .map_err(|e| format!("{}: {e}", GradeFault::Task.prefix()))?;
        let mirror = self
            .fetch(job, &task.base_commit, &task.reference_commit)
            .await
            .map_err(|e| format!("{}: {e:#}", GradeFault::FetchHead.prefix()))?;
        let request = GradeRequest {
            task,
            repo: mirror,
            head: job.head_sha.clone(),
            lib: self.root.join("runners/python"),
            executor: self.executor.clone(),
            keep_workdir: false,
            retries: self.retries,
            unvalidated: self.unvalidated,
        };
        match grade_submission(&request, &|_| {}).await {
            Ok(report) => Ok(report),
            Err(GradeError::Task(e) | GradeError::Usage(e)) => {
                Err(format!("{}: {e:#}", GradeFault::Task.prefix()))
            }
            Err(GradeError::Infra(e)) => Err(format!("{}: {e:#}", GradeFault::Infra.prefix())),
        }
    }

    async fn fetch(&self, job: &Job, base: &str, reference: &str) -> anyhow::Result<PathBuf> {
        fetch_submission(
            &self.github,
            &self.mirrors,
            &self.web_url,
            job,
            base,
            reference,
        )
        .await
    }
}

/// Fetches a job's head from the PR's head repository and the task's commits from the
/// repository the App is installed on, into one mirror; returns the mirror.
pub(crate) async fn fetch_submission(
    github: &GitHubApp,
    mirrors: &Arc<Mirrors>,
    web_url: &str,
    job: &Job,
    base: &str,
    reference: &str,
) -> anyhow::Result<PathBuf> {
    let (owner, name) = job
        .repo
        .split_once('/')
        .context("repository is not owner/name")?;
    let client = github.client(job.installation_id, owner, name).await?;
    let pull = client.pull_request(job.number).await?;
    let head_url = pull
        .head_clone_url
        .context("the head repository was deleted")?;
    let token = github.installation_token(job.installation_id).await?;
    let base_url = format!("{web_url}{}.git", job.repo);
    let mirrors = mirrors.clone();
    let (repo, head) = (job.repo.clone(), job.head_sha.clone());
    let (base, reference) = (base.to_owned(), reference.to_owned());
    tokio::task::spawn_blocking(move || {
        // The task's commits first: a missing one is reported by the grade, not here.
        if let Err(e) = mirrors.fetch(&repo, &base_url, Some(&token), &[&base, &reference]) {
            tracing::warn!(error = %format!("{e:#}"), "cannot fetch the task's base and reference commits");
        }
        mirrors.fetch(&repo, &head_url, Some(&token), &[&head])
    })
    .await
    .context("the fetch task panicked")?
}
