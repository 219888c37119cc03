//! The service's durable state: webhook deliveries, pull requests, grading jobs and the outbox
//! of reports to send. The only module that names sqlx; nothing sqlx-typed leaves it.
//!
//! # Backends
//!
//! One set of statements (`queries.rs`) runs through sqlx's `Any` driver on either backend:
//!
//! - **SQLite** (the embedded default), URL `sqlite://PATH` (the file is created when missing;
//!   `?mode=rwc` is added unless the URL names a mode). Every connection runs
//!   `journal_mode=WAL`, `synchronous=FULL` (a commit is fsynced before it returns, so a
//!   delivery the server acknowledged survives a crash or power loss), `busy_timeout=10000`
//!   and `foreign_keys=ON`. Transactions begin `IMMEDIATE`, taking the write lock up front, so
//!   concurrent writers wait for each other instead of failing half way.
//!   `sqlite::memory:` (for tests) is one connection that never closes: a `Store` call made
//!   while a [`Tx`] is open waits for it.
//! - **PostgreSQL**, URL `postgres://…` or `postgresql://…`, for several hosts sharing one
//!   queue. Claims use `FOR UPDATE SKIP LOCKED`.
//!
//! Timestamps are stored as microseconds since the Unix epoch (UTC) and booleans as SQLite
//! integers / PostgreSQL booleans: the `Any` driver reads neither `TIMESTAMPTZ` nor SQLite's
//! `BOOLEAN`. The schema is applied at [`Store::open`]; see `migrations.rs`.
//!
//! # Atomicity
//!
//! Every [`Store`] method is atomic on its own. To commit several changes together (a job
//! finished *and* the reports to send about it; a delivery processed *and* the job it enqueued)
//! take a [`Tx`] with [`Store::begin`]: it has the same operations, and nothing it did is
//! visible until [`Tx::commit`]. Dropping it, or [`Tx::rollback`], discards everything.
//!
//! Isolation differs, so callers must not rely on more than this: on SQLite a `Tx` holds the
//! write lock from its start (transactions run one at a time); on PostgreSQL it is READ
//! COMMITTED (each statement sees what was committed before it). Every operation is written to
//! be correct under both: the state changes are single conditional statements (`finish_job`
//! applies only while the lease is the caller's, `claim_job` only to a claimable job) and
//! `enqueue_job` locks what it reads. A read in a `Tx` followed by a write that depends on it
//! is not protected from a concurrent writer on PostgreSQL: express such a change as one of
//! the conditional operations instead.
//!
//! On PostgreSQL, [`Store::enqueue_job`] locks the pull request's row in `job_locks` until the
//! transaction ends; in a [`Tx`] call it before changing that pull request's jobs otherwise
//! (a deadlock is reported as a transient error, and retrying the transaction is safe).

pub mod check;
mod error;
mod migrations;
mod model;
mod queries;

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Executor};

pub use error::StoreError;
pub use model::*;

/// `url` without its password (`postgres://user:***@host/db`), for messages and records.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{masked}@{host}{}", &rest[authority_end..])
        }
        None => url.to_owned(),
    }
}

/// A handle on the database: cheap to clone, shared by the server, processor, workers and the
/// outbox.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// A transaction: the [`Store`] operations, committed together by [`Tx::commit`] or not at
/// all (dropping the `Tx` rolls back).
pub struct Tx {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;";

impl Store {
    /// Connects to `url` (see the module docs), applies the pending migrations and returns the
    /// store. Safe to call from several processes at once.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = backend_of(url)?;
        let (url, options) = match backend {
            Backend::Sqlite => {
                let memory = url.contains(":memory:") || url.contains("mode=memory");
                let url = if url.contains("mode=") || memory {
                    url.to_owned()
                } else {
                    format!("{url}{}mode=rwc", if url.contains('?') { '&' } else { '?' })
                };
                let mut options = AnyPoolOptions::new()
                    .max_connections(if memory { 1 } else { 8 })
                    .after_connect(|conn, _| {
                        Box::pin(async move { conn.execute(SQLITE_PRAGMAS).await.map(drop) })
                    });
                if memory {
                    // One connection that never closes: each connection would be its own database.
                    options = options
                        .min_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None);
                }
                (url, options)
            }
            Backend::Postgres => (url.to_owned(), AnyPoolOptions::new().max_connections(10)),
        };
        let pool = options
            .acquire_timeout(Duration::from_secs(30))
            .connect(&url)
            .await
            .map_err(StoreError::db("connecting to the store"))?;
        let migrate_err = |source: sqlx::migrate::MigrateError| StoreError::Migrate {
            backend: backend.as_str(),
            source: Box::new(source),
        };
        let migrator = migrations::migrator(backend).await.map_err(migrate_err)?;
        match backend {
            // sqlx takes no lock on SQLite; hold the write lock for the whole run so that two
            // processes opening a new file at once do not both apply a migration.
            Backend::Sqlite => {
                let mut tx = pool
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(StoreError::db("locking for migrations"))?;
                migrator.run(&mut *tx).await.map_err(migrate_err)?;
                tx.commit()
                    .await
                    .map_err(StoreError::db("committing migrations"))?;
            }
            // sqlx holds an advisory lock while it migrates.
            Backend::Postgres => migrator.run(&pool).await.map_err(migrate_err)?,
        }
        Ok(Store { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The schema version and, on SQLite, the durability settings in force.
    pub async fn info(&self) -> Result<StoreInfo, StoreError> {
        let mut conn = self.acquire().await?;
        queries::info(&mut conn, self.backend).await
    }

    /// The migration version this binary brings (what [`StoreInfo::schema_version`] reads
    /// after [`Store::open`]).
    pub fn latest_schema_version(&self) -> i64 {
        migrations::latest_version(self.backend)
    }

    /// Starts a transaction (on SQLite it takes the write lock now).
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        let tx = match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .map_err(StoreError::db("starting a transaction"))?;
        Ok(Tx {
            tx,
            backend: self.backend,
        })
    }

    async fn acquire(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, StoreError> {
        self.pool
            .acquire()
            .await
            .map_err(StoreError::db("acquiring a connection"))
    }
}

impl Tx {
    /// Makes everything this transaction did durable and visible, at once.
    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await.map_err(StoreError::db("committing"))
    }

    /// Discards everything this transaction did (as dropping it does).
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.tx
            .rollback()
            .await
            .map_err(StoreError::db("rolling back"))
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }
}

fn backend_of(url: &str) -> Result<Backend, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else {
        Err(StoreError::UnsupportedUrl(url.to_owned()))
    }
}

/// Defines each operation twice over the one function in `queries`: on [`Store`] (a pooled
/// connection in autocommit mode, or its own transaction for the `atomic` ones) and on [`Tx`]
/// (inside the caller's transaction).
macro_rules! operations {
    (
        single { $( $(#[$sm:meta])* fn $sn:ident( $($sa:ident : $st:ty),* ) -> $sr:ty; )* }
        atomic { $( $(#[$am:meta])* fn $an:ident( $($aa:ident : $at:ty),* ) -> $ar:ty; )* }
    ) => {
        impl Store {
            $(
                $(#[$sm])*
                pub async fn $sn(&self, $($sa: $st),*) -> Result<$sr, StoreError> {
                    let mut conn = self.acquire().await?;
                    queries::$sn(&mut conn, self.backend, $($sa),*).await
                }
            )*
            $(
                $(#[$am])*
                pub async fn $an(&self, $($aa: $at),*) -> Result<$ar, StoreError> {
                    let mut tx = self.begin().await?;
                    let out = queries::$an(&mut tx.tx, self.backend, $($aa),*).await?;
                    tx.commit().await?;
                    Ok(out)
                }
            )*
        }
        impl Tx {
            $(
                $(#[$sm])*
                pub async fn $sn(&mut self, $($sa: $st),*) -> Result<$sr, StoreError> {
                    queries::$sn(&mut self.tx, self.backend, $($sa),*).await
                }
            )*
            $(
                $(#[$am])*
                pub async fn $an(&mut self, $($aa: $at),*) -> Result<$ar, StoreError> {
                    queries::$an(&mut self.tx, self.backend, $($aa),*).await
                }
            )*
        }
    };
}

operations! {
    single {
        /// Answers when the database does (readiness).
        fn ping() -> ();

        // deliveries

        /// Stores a webhook delivery, durably when it returns (SQLite: fsynced WAL commit);
        /// a delivery id already stored is left as it was: [`Inserted::Duplicate`].
        fn insert_delivery(delivery: &NewDelivery) -> Inserted;
        fn get_delivery(delivery_id: &str) -> Option<Delivery>;
        /// Deliveries not yet marked processed, oldest received first.
        fn unprocessed_deliveries(limit: u32) -> Vec<Delivery>;
        /// Marks a delivery processed, with the error that ended its processing if any.
        /// False when no such delivery is stored.
        fn mark_delivery_processed(delivery_id: &str, error: Option<&str>) -> bool;
        /// Deletes deliveries processed before `processed_before`; returns how many.
        fn prune_deliveries(processed_before: DateTime<Utc>) -> u64;

        // pull requests and heads

        /// Inserts or updates a pull request, keeping its `sticky_comment_id` and
        /// `grade_requested`.
        fn upsert_pull(pull: &PullUpsert) -> Pull;
        fn get_pull(repo: &str, number: u64) -> Option<Pull>;
        /// `None` forgets the comment (it was deleted). False when the pull is unknown.
        fn set_sticky_comment_id(repo: &str, number: u64, comment_id: Option<u64>) -> bool;
        /// False when the pull is unknown.
        fn set_grade_requested(repo: &str, number: u64, requested: bool) -> bool;
        /// Remembers that `head_sha` is (or was) the head of pull `number`.
        fn index_head(repo: &str, head_sha: &str, number: u64) -> ();
        /// The pulls whose head was `head_sha`, by number.
        fn pulls_for_head(repo: &str, head_sha: &str) -> Vec<u64>;

        // jobs

        /// Takes the oldest queued job, or the oldest running one whose lease lapsed, for
        /// `owner` until now + `lease`, counting an attempt. Two claimers never get the same job.
        fn claim_job(owner: &str, lease: Duration) -> Option<Job>;
        /// Extends `owner`'s lease to now + `lease`. False when the job is no longer running
        /// under `owner` (cancelled, or reclaimed after the lease lapsed): stop working on it.
        fn renew_lease(id: JobId, owner: &str, lease: Duration) -> bool;
        /// Records the grade. Applies only while the job is running under `owner`'s lease:
        /// false when it was cancelled or reclaimed meanwhile (the result is then dropped).
        fn finish_job(id: JobId, owner: &str, verdict: &str, result_json: &str) -> bool;
        /// Finishes the job without a verdict (it cannot be graded). Same lease rule as
        /// [`Store::finish_job`].
        fn fail_job(id: JobId, owner: &str, error: &str) -> bool;
        /// Gives the job back to the queue (a transient failure), noting why. Same lease rule.
        fn release_job(id: JobId, owner: &str, error: Option<&str>) -> bool;
        /// Gives the job back to the queue untouched (the server is stopping): like
        /// [`Store::release_job`], but the claim's attempt is not counted.
        fn hand_back_job(id: JobId, owner: &str) -> bool;
        /// Cancels a queued or running job; returns it, or `None` when it was not active.
        fn cancel_job(id: JobId) -> Option<Job>;
        /// Cancels every active job of a pull request (it was closed); returns them by id.
        fn cancel_jobs_for_pull(repo: &str, number: u64) -> Vec<Job>;
        /// Cancels the active jobs of a pull request whose head is not `head_sha` or whose
        /// task is not `task_id` (every active one when `task_id` is `None`): what the pull
        /// request no longer is. Returns them by id.
        fn supersede_jobs(repo: &str, number: u64, head_sha: &str, task_id: Option<&str>) -> Vec<Job>;
        /// Cancels the active jobs of an installation (`repos` empty), or of those of its
        /// repositories (full names); returns them by id.
        fn cancel_jobs_for_installation(installation_id: u64, repos: &[String]) -> Vec<Job>;
        /// Every job, of any pull request of `repo`, that grades commit `head_sha`, by id.
        fn jobs_for_head(repo: &str, head_sha: &str) -> Vec<Job>;
        fn set_check_run_id(id: JobId, check_run_id: u64) -> bool;
        fn get_job(id: JobId) -> Option<Job>;
        /// Queued and running jobs of a pull request, by id.
        fn active_jobs_for_pull(repo: &str, number: u64) -> Vec<Job>;
        /// Every job of a pull request, by id.
        fn jobs_for_pull(repo: &str, number: u64) -> Vec<Job>;
        fn count_jobs_by_state() -> JobCounts;

        // grades (see queries/grades.rs)

        /// A job with when it finished and the author it counts for.
        fn graded_job(id: JobId) -> Option<GradedJob>;
        /// Every job of a pull request with its grade, by id: the grade page's history.
        fn graded_jobs_for_pull(repo: &str, number: u64) -> Vec<GradedJob>;
        /// The newest `limit` finished jobs (graded or given up on) that finished at or after
        /// `since`, oldest first: what the statistics aggregate.
        fn finished_jobs(since: Option<DateTime<Utc>>, limit: u32) -> Vec<GradedJob>;
        /// Jobs per backend and state, by backend: the dashboard's queue and engine state.
        fn count_jobs_by_backend() -> Vec<BackendCounts>;

        // outbox

        /// Queues a report, due now. Use [`Tx::push_outbox`] to commit it together with the
        /// job change it reports.
        fn push_outbox(row: &NewOutbox) -> OutboxId;
        /// Pending rows due at `now`, by id, at most `limit`. A row waits while an earlier row
        /// of the same job is pending, so one job's reports go out in order. Reads only: for
        /// a single deliverer. Several deliverers use [`Store::claim_outbox`].
        fn due_outbox(now: DateTime<Utc>, limit: u32) -> Vec<OutboxRow>;
        /// Like [`Store::due_outbox`], but also moves the rows' `next_attempt_at` to now +
        /// `lease`, so no other deliverer takes them meanwhile.
        fn claim_outbox(now: DateTime<Utc>, lease: Duration, limit: u32) -> Vec<OutboxRow>;
        fn get_outbox(id: OutboxId) -> Option<OutboxRow>;
        /// Every outbox row of a job, by id.
        fn outbox_for_job(job_id: JobId) -> Vec<OutboxRow>;
        /// Marks a pending row sent. False when it was not pending.
        fn complete_outbox(id: OutboxId) -> bool;
        /// Counts a failed attempt and makes the row due again at `next_attempt_at`.
        fn retry_outbox(id: OutboxId, next_attempt_at: DateTime<Utc>, error: &str) -> bool;
        /// Gives up on a pending row (permanent error, or too many attempts).
        fn dead_outbox(id: OutboxId, error: &str) -> bool;
        fn pending_outbox_count() -> u64;
        /// Every pending row, due or not, by id.
        fn pending_outbox() -> Vec<OutboxRow>;

        // refused deliveries and installations (see queries/refused.rs)

        /// Records a delivery answered with a 4xx; true when it was not recorded yet.
        fn record_refused_delivery(refused: &RefusedDelivery) -> bool;
        fn get_refused_delivery(delivery_id: &str) -> Option<RefusedDelivery>;
        /// The newest refused deliveries first, at most `limit`.
        fn refused_deliveries(limit: u32) -> Vec<RefusedDelivery>;
        fn count_refused_deliveries() -> u64;
        /// Records an installation of the App as active (created, repositories added) or not
        /// (deleted, suspended).
        fn set_installation(installation_id: u64, active: bool) -> ();
        /// Installations to resync on start: the active ones, and those of known pull requests
        /// that are not known to be inactive.
        fn known_installations() -> Vec<u64>;
        /// Whether the store knows the installation as active (`None`: never heard of it).
        fn installation_active(installation_id: u64) -> Option<bool>;
        /// The numbers of the pull requests of `repo` the store has as open.
        fn open_pull_numbers(repo: &str) -> Vec<u64>;

        // remote backends (see queries/remote.rs)

        /// Routes a queued, never dispatched job to a remote backend. False otherwise.
        fn set_job_backend(id: JobId, backend: &str) -> bool;
        /// Takes the oldest queued job of `remote` that is due (see `requeue_remote`) for a
        /// dispatch: running, owned by
        /// `remote:<backend>` until `until`, with the next dispatch number and `remote_open`.
        fn claim_dispatch(remote: &str, until: DateTime<Utc>) -> Option<Job>;
        /// Stores the hash of a dispatch's result token.
        fn insert_job_token(id: JobId, dispatch: u32, token_hash: &str, expires_at: DateTime<Utc>) -> ();
        /// Records the engine's id of dispatch `dispatch` (and, while the job runs, its
        /// deadline). `None` when the job has moved on to another dispatch.
        fn set_external_id(id: JobId, dispatch: u32, external_id: &str, deadline: DateTime<Utc>) -> Option<Job>;
        /// Jobs of `backend` whose current dispatch may still be alive in the engine.
        fn open_remote_jobs(backend: &str) -> Vec<Job>;
        /// The current dispatch is over in the engine. False when it already was.
        fn close_remote(id: JobId, dispatch: u32) -> bool;
        /// Puts a running remote job back in the queue for another dispatch, counting a lost
        /// run if `lost`, not to be claimed before `not_before` (a queued remote job's
        /// `lease_until`). `None` when dispatch `dispatch` is no longer the running one.
        fn requeue_remote(id: JobId, dispatch: u32, lost: bool, error: &str, not_before: Option<DateTime<Utc>>) -> Option<Job>;
        /// Counts a lost run of dispatch `dispatch` without requeueing (the job is given up).
        fn count_lost_run(id: JobId, dispatch: u32) -> bool;
        /// Remembers that the engine requeued the current dispatch `restarts` times. True when
        /// that is news.
        fn note_remote_restarts(id: JobId, dispatch: u32, restarts: u32) -> bool;
        fn find_job_token(id: JobId, token_hash: &str) -> Option<JobToken>;
        /// Marks a token used. False when it already was: a token is good for one result.
        fn use_job_token(token_hash: &str) -> bool;
        fn insert_job_result(id: JobId, dispatch: u32, disposition: Disposition, reason: Option<&str>, body: &str) -> ();
        /// Every result posted for a job, oldest first.
        fn job_results(id: JobId) -> Vec<JobResult>;
        /// Jobs of `backend` whose current or last engine id is `external_id`, newest first.
        fn jobs_by_external_id(backend: &str, external_id: &str) -> Vec<Job>;
    }
    atomic {
        /// Enqueues a grade of `head_sha` of pull `number` against `task_id`, in one
        /// transaction: every queued or running job of the pull for another head SHA or
        /// another task is cancelled (returned in [`Enqueued::cancelled`]), and an active job for the same
        /// (pull, head, task) is returned instead of a new one (`created: false`). A finished
        /// or cancelled job does not block a new one (a regrade).
        fn enqueue_job(repo: &str, number: u64, head_sha: &str, task_id: &str, installation_id: u64) -> Enqueued;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_is_shown_without_its_password() {
        for (url, shown) in [
            (
                "postgres://infradev:s3cret@127.0.0.1:55432/infradev",
                "postgres://infradev:***@127.0.0.1:55432/infradev",
            ),
            ("postgres://u:p@ss@db/x", "postgres://u:***@db/x"),
            ("postgres://reader@db/x", "postgres://reader@db/x"),
            (
                "sqlite:///var/lib/infradev/db.sqlite",
                "sqlite:///var/lib/infradev/db.sqlite",
            ),
            ("sqlite://a@b.db", "sqlite://a@b.db"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(super::redacted_url(url), shown, "{url}");
        }
    }
}
