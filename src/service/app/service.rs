//! `infradev serve`: the HTTP server plus the background loops (processor, workers, outbox,
//! reconcile), all on one store. Webhooks are hints: every loop also runs on a timer, and the
//! reconcile pass resumes lapsed jobs, delivers what the outbox still holds and (optionally)
//! asks GitHub for failed deliveries to redeliver.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::drain::{DrainControl, DrainSummary, Phase};
use super::mirror::Mirrors;
use super::outbox::Outbox;
use super::processor::Processor;
use super::remote::RemoteBackend;
use super::worker::Worker;
use crate::grade::ExecutorChoice;
use crate::service::backend::github_actions::GitHubActions;
use crate::service::backend::route::route;
use crate::service::backend::slurm::Slurm;
use crate::service::backend::{BackendName, Remote};
use crate::service::config::{ExecutorName, Secrets, ServerConfig};
use crate::service::github::{GitHubApp, RetryPolicy};
use crate::service::server::{AppState, Draining, create_app, install_metrics};
use crate::service::store::{JobState, RefusalSource, RefusedDelivery, Store};
use crate::task::Registry;

/// How often each loop runs when nothing wakes it.
const IDLE_POLL: Duration = Duration::from_secs(2);
/// How long handing the jobs back and the final outbox flush may take, each, when draining.
const DRAIN_STEP: Duration = Duration::from_secs(30);
/// How far back failed webhook deliveries are looked for (GitHub keeps three days).
const REDELIVERY_WINDOW: chrono::Duration = chrono::Duration::hours(72);
/// A failed delivery younger than this is left for a later pass: GitHub may still be
/// delivering it, and asking for it again would only deliver it twice.
const IN_FLIGHT: chrono::Duration = chrono::Duration::seconds(20);

/// A running service. Dropping it (or [`Service::abort`]) stops everything at once, like a
/// crash: whatever was acknowledged is in the store and the next start resumes it;
/// [`Service::drain`] stops it gracefully.
pub struct Service {
    addr: SocketAddr,
    /// The HTTP server.
    http: JoinSet<()>,
    /// The processor, outbox, remote and reconcile loops.
    tasks: JoinSet<()>,
    /// The local workers (drained apart from the rest).
    workers: JoinSet<()>,
    draining: Draining,
    control: DrainControl,
    outbox: Arc<Outbox>,
    grace: Duration,
}

/// Knobs tests turn (short leases, fast retries); production uses the defaults.
#[derive(Debug, Clone)]
pub struct Tuning {
    pub retry: RetryPolicy,
    pub poll: Duration,
    /// Upper bound on the remote follower's interval (`backends.follow_interval_s`).
    pub follow: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            retry: RetryPolicy::default(),
            poll: IDLE_POLL,
            follow: Duration::MAX,
        }
    }
}

impl Service {
    pub async fn start(
        config: ServerConfig,
        secrets: Secrets,
        tuning: Tuning,
    ) -> anyhow::Result<Service> {
        let store = Store::open(&config.store.url)
            .await
            .with_context(|| format!("cannot open the store {}", config.store.url))?;
        let github = Arc::new(GitHubApp::new(
            &config.github.api_url,
            config.github.app_id,
            &secrets.private_key,
        )?);
        let registry = Registry::load(&config.root).context("cannot read the tasks")?;
        let known_tasks: Vec<String> = registry
            .tasks
            .iter()
            .flatten()
            .map(|t| t.id.clone())
            .collect();
        let (wake_processor, wake_worker, wake_outbox, wake_remote) = (
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
        );
        // Which tasks go to a remote engine (`[[backends.route]]`; the rest: local workers).
        let task_backends: BTreeMap<String, BackendName> = registry
            .tasks
            .iter()
            .flatten()
            .map(|t| {
                (
                    t.id.clone(),
                    route(&config.backends.routes, &t.id, &t.resources),
                )
            })
            .filter(|(_, b)| *b != BackendName::Local)
            .collect();

        let public_url = config.web.public_url()?;
        let pages = crate::service::server::Pages {
            operator_token: config
                .web
                .operator_token()
                .context("cannot read the operator token")?,
            web_url: config.github.web_url.clone(),
            root: std::fs::canonicalize(&config.root).unwrap_or(config.root.clone()),
            secure_cookie: public_url
                .as_deref()
                .is_some_and(|u| u.starts_with("https://")),
        };
        if pages.operator_token.is_none() {
            tracing::info!("no operator token: grade pages are public only, no dashboard");
        }
        let state = AppState {
            store: store.clone(),
            intake: crate::service::server::Intake::start(store.clone()),
            webhook_secrets: Arc::new(secrets.webhook_secrets),
            wake: wake_processor.clone(),
            wake_outbox: wake_outbox.clone(),
            wake_remote: wake_remote.clone(),
            metrics: install_metrics(),
            pages: Arc::new(pages),
        };
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        let draining = Draining::default();
        let app = create_app(state, config.body_limit_bytes, draining.clone());
        let mut http = JoinSet::new();
        http.spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the HTTP server stopped");
            }
        });
        let mut tasks = JoinSet::new();

        let processor = Arc::new(Processor {
            store: store.clone(),
            github: github.clone(),
            policy: config.agents.clone(),
            known_tasks,
            wake_worker: wake_worker.clone(),
            wake_outbox: wake_outbox.clone(),
            task_backends: task_backends.clone(),
            wake_remote: wake_remote.clone(),
            resynced: std::sync::atomic::AtomicBool::new(false),
            retry: tuning.retry,
            waiting: Default::default(),
        });
        spawn_loop(
            &mut tasks,
            "processor",
            wake_processor.clone(),
            tuning.poll,
            move || {
                let p = processor.clone();
                async move {
                    // Drain: a pass handles one batch; a backlog must not wait a poll per batch.
                    while p.process_pending().await? > 0 {}
                    // Open PRs nobody told us about (until it succeeds once).
                    p.resync_on_start().await
                }
            },
        );

        let outbox = Arc::new(Outbox {
            store: store.clone(),
            github: github.clone(),
            config: config.outbox.clone(),
            retry: tuning.retry,
            public_url,
            paused: Default::default(),
        });
        let outbox_loop = outbox.clone();
        spawn_loop(
            &mut tasks,
            "outbox",
            wake_outbox.clone(),
            tuning.poll,
            move || {
                let o = outbox_loop.clone();
                async move { o.deliver_due().await.map(|_| ()) }
            },
        );

        let root = std::fs::canonicalize(&config.root).unwrap_or(config.root.clone());
        let mirrors = Arc::new(Mirrors::new(
            config.work_dir.join("mirrors"),
            config.github.git_url_rewrite.clone(),
        ));
        let executor = match config.worker.executor {
            ExecutorName::Docker => ExecutorChoice::Docker {
                wheels: config.worker.wheels.clone(),
            },
            ExecutorName::Local => ExecutorChoice::Local {
                python: config.worker.python.clone(),
            },
        };
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "infradev".into());
        let control = DrainControl::default();
        let mut workers = JoinSet::new();
        // `concurrency = 0`: this server does not grade (intake, processing and reports only).
        for slot in 0..config.worker.concurrency {
            let worker = Arc::new(Worker {
                store: store.clone(),
                github: github.clone(),
                mirrors: mirrors.clone(),
                root: root.clone(),
                web_url: config.github.web_url.clone(),
                executor: executor.clone(),
                retries: config.worker.retries,
                unvalidated: match config.worker.allow_unvalidated {
                    true => crate::grade::Unvalidated::Allow,
                    false => crate::grade::Unvalidated::Refuse,
                },
                lease: Duration::from_secs(config.worker.lease_s),
                owner: format!(
                    "{host}/{}/{}/{slot}",
                    std::process::id(),
                    uuid::Uuid::new_v4().simple()
                ),
                wake_outbox: wake_outbox.clone(),
                drain: control.drain(),
            });
            let wake = wake_worker.clone();
            let poll = tuning.poll;
            workers.spawn(async move {
                // Like `spawn_loop`, but it ends once the server is stopping.
                while !worker.drain.stopping() {
                    // Keep grading while jobs are there.
                    let step = async {
                        while worker.run_once().await? {}
                        anyhow::Ok(())
                    };
                    if let Err(e) = step.await {
                        tracing::warn!(loop_name = "worker", error = %format!("{e:#}"), "background step failed");
                    }
                    tokio::select! {
                        _ = wake.notified() => {}
                        _ = tokio::time::sleep(poll) => {}
                        _ = worker.drain.stopped() => {}
                    }
                }
            });
        }

        for backend in remote_backends(&config, &task_backends, &github)? {
            let remote = Arc::new(RemoteBackend::new(
                backend,
                store.clone(),
                github.clone(),
                mirrors.clone(),
                root.clone(),
                config.github.web_url.clone(),
                config.backends.result_url.clone().unwrap_or_default(),
                Duration::from_secs(config.backends.queue_timeout_s),
                Duration::from_secs(config.backends.result_grace_s),
                wake_outbox.clone(),
                wake_worker.clone(),
            ));
            // Several dispatchers per backend: claims are atomic, so they never take the same
            // job, and submissions overlap the engine's round trips.
            for _ in 0..config.backends.dispatch_concurrency.max(1) {
                let dispatcher = remote.clone();
                spawn_loop(
                    &mut tasks,
                    "dispatcher",
                    wake_worker.clone(),
                    tuning.poll,
                    move || {
                        let d = dispatcher.clone();
                        async move {
                            while d.dispatch_once().await? {}
                            Ok(())
                        }
                    },
                );
            }
            spawn_loop(
                &mut tasks,
                "follower",
                wake_remote.clone(),
                Duration::from_secs(config.backends.follow_interval_s.max(1)).min(tuning.follow),
                move || {
                    let f = remote.clone();
                    async move { f.follow_once().await }
                },
            );
        }

        let reconcile = Reconcile {
            store,
            github,
            redeliver: config.reconcile.redeliver_failed,
            wake: [wake_processor, wake_worker, wake_outbox],
        };
        let reconcile = Arc::new(reconcile);
        spawn_loop(
            &mut tasks,
            "reconcile",
            Arc::new(Notify::new()),
            Duration::from_secs(config.reconcile.interval_s.max(1)),
            move || {
                let r = reconcile.clone();
                async move { r.pass().await }
            },
        );
        tracing::info!(%addr, "serving");
        Ok(Service {
            addr,
            http,
            tasks,
            workers,
            draining,
            control,
            outbox,
            grace: Duration::from_secs(config.worker.drain_grace_s),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Runs until one of the loops ends (it should not) or the process is stopped.
    pub async fn wait(&mut self) {
        // An empty set (no workers: `concurrency = 0`) answers `None` at once: not an end.
        tokio::select! {
            Some(_) = self.http.join_next() => {}
            Some(_) = self.tasks.join_next() => {}
            Some(_) = self.workers.join_next() => {}
        }
    }

    /// Stops everything at once, mid-grade if need be.
    pub async fn abort(mut self) {
        for set in [&mut self.http, &mut self.tasks, &mut self.workers] {
            set.abort_all();
            while set.join_next().await.is_some() {}
        }
    }

    /// Stops gracefully: from now on the webhook intake answers 503 (GitHub delivers those
    /// again later), nothing new is claimed, running grades get `[worker] drain_grace_s` to
    /// finish and past it hand their jobs back (lease released, queued again), then the outbox
    /// is flushed once. The other loops hold nothing uncommitted and stop at once.
    /// The intake refuses and the workers stop claiming as soon as this is called (before the
    /// returned future is first polled).
    pub fn drain(self) -> impl std::future::Future<Output = DrainSummary> {
        self.draining.start();
        self.control.set(Phase::Draining);
        async move { self.drain_rest().await }
    }

    async fn drain_rest(mut self) -> DrainSummary {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        let workers = &mut self.workers;
        let all_done = async { while workers.join_next().await.is_some() {} };
        if tokio::time::timeout(self.grace, all_done).await.is_err() {
            self.control.set(Phase::HandBack);
            let all_done = async { while self.workers.join_next().await.is_some() {} };
            if tokio::time::timeout(DRAIN_STEP, all_done).await.is_err() {
                // Their leases lapse and reconcile resumes the jobs, as after a crash.
                tracing::warn!("a worker did not hand its job back in time; its lease will lapse");
            }
        }
        self.workers.abort_all();
        while self.workers.join_next().await.is_some() {}
        let outbox_delivered = match tokio::time::timeout(DRAIN_STEP, self.outbox.deliver_due())
            .await
        {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "the final outbox flush failed; the next start delivers the rest");
                0
            }
            Err(_) => {
                tracing::warn!(
                    "the final outbox flush timed out; the next start delivers the rest"
                );
                0
            }
        };
        self.http.abort_all();
        while self.http.join_next().await.is_some() {}
        let (finished, requeued) = self.control.counts();
        DrainSummary {
            finished,
            requeued,
            outbox_delivered,
        }
    }
}

/// The remote backends some task is routed to, built from their configuration.
fn remote_backends(
    config: &ServerConfig,
    task_backends: &BTreeMap<String, BackendName>,
    github: &Arc<GitHubApp>,
) -> anyhow::Result<Vec<Remote>> {
    let used: BTreeSet<BackendName> = task_backends.values().copied().collect();
    let mut remotes = Vec::new();
    for name in used {
        remotes.push(match name {
            BackendName::Local => continue,
            BackendName::Slurm => Remote::Slurm(Slurm::new(
                config
                    .backends
                    .slurm
                    .clone()
                    .context("a route names slurm, which is not configured")?,
            )),
            BackendName::GitHubActions => Remote::GitHubActions(GitHubActions::new(
                config
                    .backends
                    .github_actions
                    .clone()
                    .context("a route names github-actions, which is not configured")?,
                github.clone(),
            )),
        });
    }
    Ok(remotes)
}

/// Runs `step` at start, on every wake-up and at least every `poll`; a failing step is logged
/// and retried on the next tick.
fn spawn_loop<F, Fut>(
    tasks: &mut JoinSet<()>,
    name: &'static str,
    wake: Arc<Notify>,
    poll: Duration,
    step: F,
) where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    tasks.spawn(async move {
        loop {
            if let Err(e) = step().await {
                tracing::warn!(loop_name = name, error = %format!("{e:#}"), "background step failed");
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(poll) => {}
            }
        }
    });
}

struct Reconcile {
    store: Store,
    github: Arc<GitHubApp>,
    redeliver: bool,
    wake: [Arc<Notify>; 3],
}

impl Reconcile {
    async fn pass(&self) -> anyhow::Result<()> {
        for w in &self.wake {
            w.notify_waiters();
            w.notify_one();
        }
        let counts = self.store.count_jobs_by_state().await?;
        for state in JobState::ALL {
            metrics::gauge!("infradev_jobs", "state" => state.as_str())
                .set(counts.get(state) as f64);
        }
        if self.redeliver {
            for failed in self
                .github
                .list_failed_deliveries(Utc::now() - REDELIVERY_WINDOW)
                .await?
            {
                // Logged moments ago: its answer may not be in GitHub's log yet.
                if Utc::now() - failed.delivered_at < IN_FLIGHT
                    || self.store.get_delivery(&failed.guid).await?.is_some()
                    || self
                        .store
                        .get_refused_delivery(&failed.guid)
                        .await?
                        .is_some()
                {
                    continue;
                }
                if (400..500).contains(&failed.status_code) {
                    // We refused it: asking again would be refused again.
                    let refused = RefusedDelivery {
                        delivery_id: failed.guid.clone(),
                        event: Some(failed.event.clone()),
                        status: failed.status_code,
                        reason: format!(
                            "GitHub's delivery log: answered {} ({})",
                            failed.status_code, failed.status
                        ),
                        source: RefusalSource::GitHubLog,
                        refused_at: Utc::now(),
                    };
                    crate::service::server::note_refused(&self.store, &refused).await?;
                    continue;
                }
                tracing::info!(guid = %failed.guid, event = %failed.event, "redelivering a failed webhook delivery");
                self.github.redeliver(failed.id).await?;
            }
        }
        metrics::gauge!("infradev_refused_deliveries")
            .set(self.store.count_refused_deliveries().await? as f64);
        Ok(())
    }
}
