//! Turns stored deliveries into state: parse the event, read the PR it concerns from the API
//! (the payload may be hours old), ask the pure `decide` what to do, then record it — PR index,
//! jobs, and the outbox rows that report them — in one transaction each. A delivery is marked
//! processed only after its effects are committed; a transient failure (the store, a GitHub
//! read) leaves it for the next pass, so nothing acknowledged is lost.
//!
//! It also resyncs open PRs (`resync.rs`): on start, for every installation it knows, and when
//! an installation is created or gains repositories.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use super::commands::permits;
use super::decide::{
    CheckOwner, Decision, ExternalId, Known, PullState, Settings, decide, decide_command,
    pull_state,
};
use super::matching::AgentPolicy;
use super::outbox::Message;
use crate::service::github::{GitHubApp, GitHubError, PullSummary, Retry, RetryPolicy, jitter};
use crate::service::store::{Delivery, JobId, Pull, PullUpsert, Store};
use crate::service::webhook::{Event, PullRequest, Repo, parse};

/// Deliveries handled per pass.
const BATCH: u32 = 50;

pub struct Processor {
    pub store: Store,
    pub github: Arc<GitHubApp>,
    pub policy: AgentPolicy,
    pub known_tasks: Vec<String>,
    /// The remote backend each task is routed to (`[[backends.route]]`); absent: local.
    pub task_backends: BTreeMap<String, crate::service::backend::BackendName>,
    /// Woken when jobs or outbox rows were added.
    pub wake_worker: Arc<Notify>,
    pub wake_outbox: Arc<Notify>,
    /// Woken when a GitHub Actions run changed (`workflow_run` / `workflow_job`): the follower of
    /// remote grades then reads the runs it dispatched instead of waiting for its next poll.
    pub wake_remote: Arc<Notify>,
    /// Set once the resync of open PRs on start succeeded.
    pub resynced: std::sync::atomic::AtomicBool,
    /// How long to wait before trying a delivery again, as GitHub asks (`retry-after`,
    /// `x-ratelimit-reset`); scaled and bounded in tests.
    pub retry: RetryPolicy,
    /// Deliveries that failed for a transient reason: not tried again before their time.
    pub waiting: std::sync::Mutex<BTreeMap<String, Waiting>>,
}

/// A delivery that failed for a transient reason, and when it may be tried again.
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    pub until: std::time::Instant,
    /// Transient failures so far (the backoff of failures GitHub named no wait for).
    pub failures: u32,
}

/// Why a delivery could not be handled.
pub(super) enum Failure {
    /// Try again on the next pass.
    Transient(anyhow::Error),
    /// Retrying cannot help; recorded on the delivery.
    Permanent(anyhow::Error),
}

impl Processor {
    /// Handles the unprocessed deliveries in arrival order; returns how many were handled.
    ///
    /// A delivery that fails for a transient reason is tried again once the wait GitHub asked
    /// for has passed (`retry-after`, `x-ratelimit-reset`, with jitter), or after a growing
    /// backoff; meanwhile the deliveries about other pull requests go on, and those about the
    /// same pull request (or installation) wait behind it, so their order is kept.
    pub async fn process_pending(&self) -> anyhow::Result<usize> {
        let mut handled = 0;
        let mut blocked: std::collections::BTreeSet<String> = Default::default();
        for delivery in self.store.unprocessed_deliveries(BATCH).await? {
            let key = order_key(&delivery);
            if blocked.contains(&key) {
                continue;
            }
            if self.wait_for(&delivery.delivery_id).is_some() {
                blocked.insert(key);
                continue;
            }
            let span = tracing::info_span!("delivery", id = %delivery.delivery_id, event = %delivery.event, action = delivery.action.as_deref().unwrap_or("-"));
            let _guard = span.enter();
            match self.handle(&delivery).await {
                Ok(()) => {
                    self.store
                        .mark_delivery_processed(&delivery.delivery_id, None)
                        .await?;
                    self.forget_wait(&delivery.delivery_id);
                    handled += 1;
                }
                Err(Failure::Permanent(e)) => {
                    tracing::warn!(error = %format!("{e:#}"), "delivery cannot be handled");
                    self.store
                        .mark_delivery_processed(&delivery.delivery_id, Some(&format!("{e:#}")))
                        .await?;
                    self.forget_wait(&delivery.delivery_id);
                    handled += 1;
                }
                Err(Failure::Transient(e)) => {
                    let wait = self.note_failure(&delivery.delivery_id, &e);
                    tracing::warn!(error = %format!("{e:#}"), wait_ms = wait.as_millis() as u64, "delivery will be retried");
                    blocked.insert(key);
                }
            }
        }
        Ok(handled)
    }

    /// How long `delivery` must still wait, if it must.
    fn wait_for(&self, delivery: &str) -> Option<std::time::Duration> {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let until = waiting.get(delivery)?.until;
        until.checked_duration_since(std::time::Instant::now())
    }

    fn forget_wait(&self, delivery: &str) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(delivery);
    }

    /// Records a transient failure of `delivery`; returns how long it now waits: what GitHub
    /// asked for, or a backoff doubling from the policy's minimum; plus jitter either way.
    fn note_failure(&self, delivery: &str, error: &anyhow::Error) -> std::time::Duration {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let failures = waiting.get(delivery).map_or(0, |w| w.failures) + 1;
        let asked = error
            .chain()
            .find_map(|e| e.downcast_ref::<GitHubError>())
            .and_then(|g| match g.retry_with(&self.retry) {
                Retry::After(wait) => Some(wait),
                Retry::Never => None,
            });
        let backoff = self
            .retry
            .bound(self.retry.min.saturating_mul(1u32 << failures.min(10)));
        let wait = jitter(asked.unwrap_or(backoff).max(self.retry.min));
        waiting.insert(
            delivery.to_owned(),
            Waiting {
                until: std::time::Instant::now() + wait,
                failures,
            },
        );
        wait
    }

    async fn handle(&self, delivery: &Delivery) -> Result<(), Failure> {
        let mut event =
            parse(&delivery.event, &delivery.payload).map_err(|e| Failure::Permanent(e.into()))?;
        self.note_installation(&event).await?;
        let known = self.known(&event).await?;
        // The PR as it is now, not as the payload (late, or redelivered hours later) says.
        if let Event::PullRequest {
            repo,
            installation_id,
            pr,
            ..
        } = &mut event
            && let Some(installation) = installation_id.or(known.installation_id)
        {
            *pr = self.fetch_pull(repo, installation, pr.number).await?;
        }
        let decided = self.with_settings(|settings| decide(&event, settings, &known));
        for note in &decided.notes {
            tracing::info!(note = %note);
        }
        for decision in decided.decisions {
            self.apply(decision).await?;
        }
        // After the decisions: a retried delivery must see the state from before it.
        if let (
            Some(state),
            Event::PullRequest {
                repo,
                installation_id,
                pr,
                ..
            },
        ) = (&decided.pull, &event)
        {
            let installation = installation_id
                .or(known.installation_id)
                .unwrap_or_default();
            self.store_pull(repo, installation, pr, state).await?;
        }
        Ok(())
    }

    /// Calls `f` with the decisions' settings.
    pub(super) fn with_settings<R>(&self, f: impl FnOnce(&Settings<'_>) -> R) -> R {
        let known_tasks: Vec<&str> = self.known_tasks.iter().map(String::as_str).collect();
        f(&Settings {
            policy: &self.policy,
            known_tasks: &known_tasks,
        })
    }

    /// The PR as the API has it now (`GET` the pull).
    pub(super) async fn fetch_pull(
        &self,
        repo: &Repo,
        installation_id: u64,
        number: u64,
    ) -> Result<PullRequest, Failure> {
        let client = self
            .github
            .client(installation_id, &repo.owner, &repo.name)
            .await
            .map_err(github_failure)?;
        let pull = client.pull_request(number).await.map_err(github_failure)?;
        Ok(from_api(pull))
    }

    /// Records `pr`'s state in the PR index (and its head in the head index), and, in the
    /// same transaction, supersedes what the pull request no longer is: its queued and
    /// running grades of another head, or of a task it no longer names, are cancelled (their
    /// check runs completed `cancelled` with the reason), so no such grade is ever posted.
    /// When the pull request comes back to a (head, task) that was graded (a force-push back,
    /// a task named again), its sticky comment is written from that grade again.
    pub(super) async fn store_pull(
        &self,
        repo: &Repo,
        installation_id: u64,
        pr: &PullRequest,
        state: &PullState,
    ) -> Result<(), Failure> {
        let transient = |e: crate::service::store::StoreError| Failure::Transient(e.into());
        let upsert = PullUpsert {
            repo: repo.full_name(),
            number: pr.number,
            head_sha: pr.head_sha.clone(),
            base_ref: pr.base_ref.clone(),
            task_id: state.task.clone(),
            is_agent: state.is_agent,
            author: pr.author_login.clone(),
            installation_id,
            draft: pr.draft,
            open: pr.state_open,
        };
        let mut tx = self.store.begin().await.map_err(transient)?;
        let before = tx
            .get_pull(&upsert.repo, pr.number)
            .await
            .map_err(transient)?;
        tx.upsert_pull(&upsert).await.map_err(transient)?;
        tx.index_head(&upsert.repo, &pr.head_sha, pr.number)
            .await
            .map_err(transient)?;
        // A closed pull request's grades were cancelled as withdrawn (`CancelActive`).
        let superseded = if pr.state_open {
            tx.supersede_jobs(&upsert.repo, pr.number, &pr.head_sha, state.task.as_deref())
                .await
                .map_err(transient)?
        } else {
            Vec::new()
        };
        for job in &superseded {
            tracing::info!(job = %job.id, head = %job.head_sha, task = %job.task_id, "superseded: the pull request is no longer this head and task");
            tx.push_outbox(&superseded_message(job, &pr.head_sha, state.task.as_deref()).to_row())
                .await
                .map_err(transient)?;
        }
        let moved = before
            .as_ref()
            .is_some_and(|b| b.head_sha != pr.head_sha || b.task_id != state.task);
        if let (true, Some(task)) = (moved && pr.state_open, &state.task) {
            let graded = tx
                .jobs_for_pull(&upsert.repo, pr.number)
                .await
                .map_err(transient)?
                .into_iter()
                .filter(|j| {
                    j.head_sha == pr.head_sha
                        && &j.task_id == task
                        && j.state == crate::service::store::JobState::Finished
                })
                .max_by_key(|j| j.id);
            if let Some(job) = graded {
                tx.push_outbox(&Message::StickyComment { job_id: job.id.0 }.to_row())
                    .await
                    .map_err(transient)?;
            }
        }
        tx.commit().await.map_err(transient)?;
        self.wake_outbox.notify_one();
        if !superseded.is_empty() {
            // Runs of superseded grades are cancelled in their engines.
            self.wake_remote.notify_waiters();
        }
        Ok(())
    }

    /// Reads PR `number` from the API, stores its state and returns it (with the stored
    /// `grade_requested`).
    async fn refresh_pull(
        &self,
        repo: &Repo,
        installation_id: u64,
        number: u64,
    ) -> Result<PullState, Failure> {
        let pr = self.fetch_pull(repo, installation_id, number).await?;
        let stored = self
            .store
            .get_pull(&repo.full_name(), number)
            .await
            .map_err(|e| Failure::Transient(e.into()))?;
        let requested = stored.is_some_and(|p| p.grade_requested);
        let (state, _, _) = self.with_settings(|settings| pull_state(&pr, settings, requested));
        self.store_pull(repo, installation_id, &pr, &state).await?;
        Ok(state)
    }

    /// Remembers installations from the events about them (the resync on start reads them).
    async fn note_installation(&self, event: &Event) -> Result<(), Failure> {
        let (id, active) = match event {
            Event::Installation {
                action,
                installation_id,
                ..
            } => match action.as_str() {
                "deleted" | "suspend" => (*installation_id, false),
                _ => (*installation_id, true),
            },
            Event::InstallationRepositories {
                installation_id, ..
            } => (*installation_id, true),
            _ => return Ok(()),
        };
        self.store
            .set_installation(id, active)
            .await
            .map_err(|e| Failure::Transient(e.into()))
    }

    /// What the store knows about the PRs an event concerns; for a check run, the job it
    /// belongs to and its PR as the API has it now.
    async fn known(&self, event: &Event) -> Result<Known, Failure> {
        let transient = |e: crate::service::store::StoreError| Failure::Transient(e.into());
        let mut known = Known::default();
        let (repo, numbers): (&Repo, Vec<u64>) = match event {
            Event::PullRequest { repo, pr, .. } => (repo, vec![pr.number]),
            Event::IssueComment {
                repo, issue_number, ..
            } => (repo, vec![*issue_number]),
            Event::CheckRunRerequested {
                repo, external_id, ..
            }
            | Event::CheckRunRequestedAction {
                repo, external_id, ..
            } => {
                known.check_owner = match external_id.as_deref().and_then(ExternalId::parse) {
                    Some(ExternalId::Job(id)) => self
                        .store
                        .get_job(JobId(id))
                        .await
                        .map_err(transient)?
                        .filter(|job| job.repo == repo.full_name())
                        .map(|job| CheckOwner::Job {
                            number: job.number,
                            head_sha: job.head_sha,
                            task: job.task_id,
                        }),
                    Some(ExternalId::NoTask(number)) => Some(CheckOwner::NoTask { number }),
                    None => None,
                };
                let numbers = match &known.check_owner {
                    Some(CheckOwner::Job { number, .. } | CheckOwner::NoTask { number }) => {
                        vec![*number]
                    }
                    None => Vec::new(),
                };
                (repo, numbers)
            }
            Event::CheckSuite {
                repo,
                head_sha,
                pull_numbers,
                ..
            } => {
                known.head_prs = self
                    .store
                    .pulls_for_head(&repo.full_name(), head_sha)
                    .await
                    .map_err(transient)?;
                let numbers = if pull_numbers.is_empty() {
                    known.head_prs.clone()
                } else {
                    pull_numbers.clone()
                };
                (repo, numbers)
            }
            _ => return Ok(known),
        };
        let mut pulls = BTreeMap::new();
        for number in numbers {
            if let Some(pull) = self
                .store
                .get_pull(&repo.full_name(), number)
                .await
                .map_err(transient)?
            {
                known.installation_id = known
                    .installation_id
                    .or(Some(pull.installation_id).filter(|i| *i != 0));
                pulls.insert(number, state_of(&pull));
            }
        }
        known.pulls = pulls;
        // A re-run decides on the PR as it is now.
        let installation = event.installation_id().or(known.installation_id);
        if let (Some(owner), Some(installation)) = (&known.check_owner, installation) {
            let number = match owner {
                CheckOwner::Job { number, .. } | CheckOwner::NoTask { number } => *number,
            };
            let state = self.refresh_pull(repo, installation, number).await?;
            known.pulls.insert(number, state);
        }
        Ok(known)
    }

    pub(super) async fn apply(&self, decision: Decision) -> Result<(), Failure> {
        let transient = |e: crate::service::store::StoreError| Failure::Transient(e.into());
        match decision {
            Decision::Grade {
                repo,
                number,
                head_sha,
                task,
                installation_id,
                reason,
            } => {
                let repo = repo.full_name();
                if reason.requests_grading() {
                    self.store
                        .set_grade_requested(&repo, number, true)
                        .await
                        .map_err(transient)?;
                }
                if !reason.new_attempt() {
                    let jobs = self
                        .store
                        .jobs_for_pull(&repo, number)
                        .await
                        .map_err(transient)?;
                    let graded = jobs.iter().any(|j| {
                        j.head_sha == head_sha
                            && j.task_id == task
                            && j.state != crate::service::store::JobState::Cancelled
                    });
                    if graded {
                        tracing::info!(%repo, number, %head_sha, "this head is already graded or queued");
                        return Ok(());
                    }
                }
                let mut tx = self.store.begin().await.map_err(transient)?;
                let enqueued = tx
                    .enqueue_job(&repo, number, &head_sha, &task, installation_id)
                    .await
                    .map_err(transient)?;
                if enqueued.created {
                    if let Some(backend) = self.task_backends.get(&task) {
                        tx.set_job_backend(enqueued.job.id, backend.as_str())
                            .await
                            .map_err(transient)?;
                    }
                    tx.push_outbox(
                        &Message::CheckQueued {
                            job_id: enqueued.job.id.0,
                        }
                        .to_row(),
                    )
                    .await
                    .map_err(transient)?;
                }
                for old in &enqueued.cancelled {
                    let message = superseded_message(old, &head_sha, Some(task.as_str()));
                    tx.push_outbox(&message.to_row()).await.map_err(transient)?;
                }
                tx.commit().await.map_err(transient)?;
                tracing::info!(%repo, number, %head_sha, %task, job = %enqueued.job.id, created = enqueued.created, reason = ?reason, "grade enqueued");
                metrics::counter!("infradev_jobs_enqueued_total")
                    .increment(u64::from(enqueued.created));
                self.wake_worker.notify_waiters();
                // A worker that is busy now misses notify_waiters; keep one wake-up for it.
                self.wake_worker.notify_one();
                self.wake_outbox.notify_one();
                if !enqueued.cancelled.is_empty() {
                    // Runs of the superseded heads are cancelled in their engines.
                    self.wake_remote.notify_waiters();
                }
            }
            Decision::CancelActive { repo, number } => {
                let repo = repo.full_name();
                let mut tx = self.store.begin().await.map_err(transient)?;
                for job in tx
                    .cancel_jobs_for_pull(&repo, number)
                    .await
                    .map_err(transient)?
                {
                    tx.push_outbox(
                        &Message::CheckCancelled {
                            job_id: job.id.0,
                            superseded_by: None,
                        }
                        .to_row(),
                    )
                    .await
                    .map_err(transient)?;
                }
                tx.commit().await.map_err(transient)?;
                self.wake_outbox.notify_one();
                self.wake_remote.notify_waiters();
            }
            Decision::NeutralNoTask {
                repo,
                number,
                head_sha,
                installation_id,
                ..
            } => {
                let message = Message::CheckNoTask {
                    repo: repo.full_name(),
                    installation_id,
                    number,
                    head_sha,
                    known_tasks: self.known_tasks.clone(),
                };
                self.store
                    .push_outbox(&message.to_row())
                    .await
                    .map_err(transient)?;
                self.wake_outbox.notify_one();
            }
            Decision::AskPermission(request) => {
                let repo = request.repo.full_name();
                let client = self
                    .github
                    .client(
                        request.installation_id,
                        &request.repo.owner,
                        &request.repo.name,
                    )
                    .await
                    .map_err(|e| Failure::Transient(e.into()))?;
                let permission = client
                    .permission(&request.user)
                    .await
                    .map_err(|e| Failure::Transient(e.into()))?;
                let known = self
                    .store
                    .get_pull(&repo, request.number)
                    .await
                    .map_err(transient)?;
                // A command acts on the PR as it is now (its head, task, draft state); one the
                // store never saw stays unknown (it was never graded nor approved).
                let state = match known {
                    Some(_) => Some(
                        self.refresh_pull(&request.repo, request.installation_id, request.number)
                            .await?,
                    ),
                    None => None,
                };
                for decision in decide_command(&request, permits(&permission), state.as_ref()) {
                    Box::pin(self.apply(decision)).await?;
                }
            }
            Decision::Reply {
                repo,
                number,
                installation_id,
                message,
            } => {
                let message = Message::Reply {
                    repo: repo.full_name(),
                    installation_id,
                    number,
                    body: message,
                };
                self.store
                    .push_outbox(&message.to_row())
                    .await
                    .map_err(transient)?;
                self.wake_outbox.notify_one();
            }
            Decision::NeutralWaiting {
                repo,
                number,
                head_sha,
                installation_id,
            } => {
                let message = Message::CheckWaiting {
                    repo: repo.full_name(),
                    installation_id,
                    number,
                    head_sha,
                };
                self.store
                    .push_outbox(&message.to_row())
                    .await
                    .map_err(transient)?;
                self.wake_outbox.notify_one();
            }
            Decision::React {
                repo,
                installation_id,
                comment_id,
                content,
            } => {
                let message = Message::React {
                    repo: repo.full_name(),
                    installation_id,
                    comment_id,
                    content,
                };
                self.store
                    .push_outbox(&message.to_row())
                    .await
                    .map_err(transient)?;
                self.wake_outbox.notify_one();
            }
            Decision::RemoteRunChanged { repo, run_id } => {
                tracing::debug!(%repo, run_id, "a workflow run changed");
                // notify_one keeps the wake-up for a follower that is busy right now.
                self.wake_remote.notify_one();
            }
            Decision::Resync {
                installation_id,
                repos,
            } => Box::pin(self.resync(installation_id, &repos)).await?,
            Decision::Withdraw {
                installation_id,
                repos,
            } => self.withdraw(installation_id, &repos).await?,
            Decision::Nothing { why } => tracing::debug!(%why, "nothing to do"),
        }
        Ok(())
    }

    /// The App lost installation `installation_id` (`repos` empty) or these repositories of
    /// it: their queued and running grades are cancelled, and nothing waiting in the outbox
    /// for them is sent (GitHub refuses the installation's tokens there). Their check runs
    /// stay as GitHub has them: the App can no longer change them.
    async fn withdraw(&self, installation_id: u64, repos: &[String]) -> Result<(), Failure> {
        let transient = |e: crate::service::store::StoreError| Failure::Transient(e.into());
        let cancelled = self
            .store
            .cancel_jobs_for_installation(installation_id, repos)
            .await
            .map_err(transient)?;
        let ours =
            |repo: &str| repos.is_empty() || repos.iter().any(|r| r.eq_ignore_ascii_case(repo));
        let mut withdrawn = 0;
        for row in self.store.pending_outbox().await.map_err(transient)? {
            let Ok(message) = serde_json::from_value::<Message>(row.payload.clone()) else {
                continue;
            };
            let target = match message.target() {
                Some(target) => Some(target),
                None => match message.job_id() {
                    Some(id) => self
                        .store
                        .get_job(id)
                        .await
                        .map_err(transient)?
                        .map(|job| (job.installation_id, job.repo)),
                    None => None,
                },
            };
            if let Some((installation, repo)) = target
                && installation == installation_id
                && ours(&repo)
            {
                self.store
                    .dead_outbox(row.id, "the App's access to the repository was removed")
                    .await
                    .map_err(transient)?;
                withdrawn += 1;
            }
        }
        if repos.is_empty() {
            // GitHub revoked its tokens; a cached one must not be offered again.
            self.github.forget_token(installation_id).await;
        }
        tracing::info!(
            installation_id,
            ?repos,
            cancelled = cancelled.len(),
            withdrawn,
            "access removed: grades cancelled, nothing more is posted"
        );
        self.wake_remote.notify_waiters();
        Ok(())
    }
}

/// How a grade superseded by the pull request's (head, task) now is reported: by the newer
/// head, or by the task it names now (`task`, or none).
fn superseded_message(
    job: &crate::service::store::Job,
    head_sha: &str,
    task: Option<&str>,
) -> Message {
    if job.head_sha != head_sha {
        Message::CheckCancelled {
            job_id: job.id.0,
            superseded_by: Some(head_sha.to_owned()),
        }
    } else {
        Message::CheckTaskChanged {
            job_id: job.id.0,
            task: task.map(str::to_owned),
        }
    }
}

pub(super) fn state_of(pull: &Pull) -> PullState {
    PullState {
        is_agent: pull.is_agent,
        task: pull.task_id.clone(),
        grade_requested: pull.grade_requested,
        draft: pull.draft,
        open: pull.open,
        head_sha: pull.head_sha.clone(),
    }
}

/// What orders a delivery among the others: deliveries with the same key are handled in
/// arrival order (one waiting holds the later ones back); others pass it. The key is the pull
/// request (or issue) a delivery is about, else its installation, else the delivery itself.
fn order_key(delivery: &Delivery) -> String {
    let Ok(event) = parse(&delivery.event, &delivery.payload) else {
        return format!("delivery:{}", delivery.delivery_id);
    };
    let number = match &event {
        Event::PullRequest { pr, .. } => Some(pr.number),
        Event::IssueComment { issue_number, .. } => Some(*issue_number),
        _ => None,
    };
    match (event.repo(), number, event.installation_id()) {
        (Some(repo), Some(n), _) => format!("pull:{}#{n}", repo.full_name()),
        (Some(repo), None, _) => format!("repo:{}", repo.full_name()),
        (None, _, Some(installation)) => format!("installation:{installation}"),
        _ => format!("delivery:{}", delivery.delivery_id),
    }
}

/// A GitHub failure: a 4xx (not found, forbidden) cannot be helped by retrying.
pub(super) fn github_failure(e: GitHubError) -> Failure {
    match e.retry() {
        Retry::Never => Failure::Permanent(e.into()),
        Retry::After(_) => Failure::Transient(e.into()),
    }
}

/// The API's pull request as the decisions read it.
pub(super) fn from_api(p: PullSummary) -> PullRequest {
    PullRequest {
        number: p.number,
        head_sha: p.head_sha,
        head_ref: p.head_ref,
        base_ref: p.base_ref,
        head_repo_full_name: p.head_repo_full_name,
        head_clone_url: p.head_clone_url,
        draft: p.draft,
        state_open: p.state_open,
        author_login: p.author_login,
        author_is_bot: p.author_is_bot,
        labels: p.labels,
        body: p.body,
    }
}
