//! The store against real databases. Every case runs twice: `<case>::sqlite` on a fresh file in
//! a temporary directory, and `<case>::postgres` on a fresh database of the cluster named by
//! `INFRADEV_TEST_PG_URL` (`runners/ensure-postgres.sh` starts one and prints its URL; the
//! database is created per test and dropped after it). Without that variable the PostgreSQL
//! half fails under `CI=true` and otherwise says loudly, on the terminal, that it did not run.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use infradev::service::store::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// harness

struct TestDb {
    url: String,
    /// Keeps the SQLite file's directory alive.
    _dir: Option<tempfile::TempDir>,
    /// PostgreSQL: the maintenance URL and the database to drop afterwards.
    drop_with: Option<(String, String)>,
}

impl TestDb {
    fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("infradev.db").display());
        TestDb {
            url,
            _dir: Some(dir),
            drop_with: None,
        }
    }

    /// `None` (after saying so on the terminal) when no PostgreSQL is configured outside CI.
    fn postgres(case: &str) -> Option<TestDb> {
        let base = match std::env::var("INFRADEV_TEST_PG_URL") {
            Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
            _ => {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!(
                        "INFRADEV_TEST_PG_URL is unset and CI=true: the store tests must run on PostgreSQL \
                         (export INFRADEV_TEST_PG_URL=$(runners/ensure-postgres.sh))"
                    );
                }
                // Straight to the terminal: the test harness captures eprintln! of passing tests.
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!! store::{case} NOT RUN on PostgreSQL: INFRADEV_TEST_PG_URL is unset \
                     (export INFRADEV_TEST_PG_URL=$(runners/ensure-postgres.sh)) !!!"
                );
                return None;
            }
        };
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        psql(&base, &format!("CREATE DATABASE {name}"));
        let url = with_database(&base, &name);
        Some(TestDb {
            url,
            _dir: None,
            drop_with: Some((base, name)),
        })
    }

    async fn open(&self) -> Store {
        Store::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((base, name)) = &self.drop_with {
            psql(
                base,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            );
        }
    }
}

/// `postgres://u:p@host:port/db?x` with another database name.
fn with_database(url: &str, database: &str) -> String {
    let (main, query) = match url.split_once('?') {
        Some((main, query)) => (main, format!("?{query}")),
        None => (url, String::new()),
    };
    let scheme_end = main.find("://").map(|i| i + 3).unwrap_or(0);
    let prefix = match main[scheme_end..].find('/') {
        Some(slash) => &main[..scheme_end + slash],
        None => main,
    };
    format!("{prefix}/{database}{query}")
}

fn psql(url: &str, sql: &str) {
    let out = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .output()
        .unwrap_or_else(|e| panic!("running psql (PostgreSQL client) for {sql:?}: {e}"));
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Defines `<case>::sqlite` and `<case>::postgres` for each `async fn <case>(db: TestDb)`.
macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                super::$case(super::TestDb::sqlite()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                if let Some(db) = super::TestDb::postgres(stringify!($case)) {
                    super::$case(db).await
                }
            }
        }
    )*};
}

on_both_backends!(
    migrations_apply_to_an_empty_database_and_are_idempotent,
    duplicate_delivery_is_a_no_op,
    delivery_survives_reopen,
    delivery_survives_a_crash_of_the_writer,
    unprocessed_deliveries_in_received_order,
    pulls_and_heads,
    enqueue_cancels_older_heads_and_is_idempotent,
    superseded_and_withdrawn_jobs_are_cancelled,
    concurrent_enqueues_of_one_pull_leave_one_active_job,
    concurrent_claimers_never_get_the_same_job,
    expired_lease_is_reclaimed_and_the_old_owner_is_refused,
    cancelled_job_refuses_finish_and_renewal,
    outbox_rows_commit_atomically_with_the_job_change,
    due_outbox_respects_next_attempt_at_and_job_order,
    claim_outbox_hides_claimed_rows,
    transactions_that_read_first_do_not_fail_under_concurrency,
    remote_jobs_are_claimed_only_by_their_backend_and_only_when_due,
    result_tokens_are_hashed_single_use_and_expire,
);

fn delivery(id: &str, payload: &[u8]) -> NewDelivery {
    NewDelivery {
        delivery_id: id.into(),
        event: "pull_request".into(),
        action: Some("opened".into()),
        payload: payload.to_vec(),
    }
}

fn pull(number: u64, head_sha: &str) -> PullUpsert {
    PullUpsert {
        repo: "acme/widgets".into(),
        number,
        head_sha: head_sha.into(),
        base_ref: "main".into(),
        task_id: Some("megatron/fix-1".into()),
        is_agent: true,
        author: "agent[bot]".into(),
        installation_id: 77,
        draft: false,
        open: true,
    }
}

const REPO: &str = "acme/widgets";
const LEASE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// schema

async fn migrations_apply_to_an_empty_database_and_are_idempotent(db: TestDb) {
    // Three openers race on the empty database: exactly one applies each migration.
    let (a, b, c) = tokio::join!(
        Store::open(&db.url),
        Store::open(&db.url),
        Store::open(&db.url)
    );
    let (a, b, c) = (a.expect("open a"), b.expect("open b"), c.expect("open c"));
    let info = a.info().await.unwrap();
    assert!(a.latest_schema_version() >= 1);
    assert_eq!(info.schema_version, a.latest_schema_version());
    match a.backend() {
        Backend::Sqlite => {
            assert_eq!(info.journal_mode.as_deref(), Some("wal"));
            assert_eq!(info.synchronous, Some(2), "synchronous=FULL");
        }
        Backend::Postgres => assert_eq!((info.journal_mode, info.synchronous), (None, None)),
    }
    a.insert_delivery(&delivery("d-1", b"{}")).await.unwrap();
    for store in [&a, &b, &c] {
        store.close().await;
    }

    // Reopening applies nothing and keeps the data.
    let store = db.open().await;
    assert_eq!(
        store.info().await.unwrap().schema_version,
        store.latest_schema_version()
    );
    assert!(store.get_delivery("d-1").await.unwrap().is_some());
    store.ping().await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn an_unknown_url_is_refused() {
    let err = Store::open("mysql://localhost/x").await.unwrap_err();
    assert!(matches!(err, StoreError::UnsupportedUrl(_)), "{err:?}");
    assert!(!err.is_transient());
}

#[tokio::test]
async fn an_in_memory_sqlite_store_works() {
    // For other modules' tests: one connection, kept open, so the data stays.
    let store = Store::open("sqlite::memory:").await.unwrap();
    assert_eq!(
        store
            .insert_delivery(&delivery("d-1", b"{}"))
            .await
            .unwrap(),
        Inserted::New
    );
    let id = store
        .enqueue_job(REPO, 1, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    let mut tx = store.begin().await.unwrap();
    tx.push_outbox(&report(id, "a")).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.pending_outbox_count().await.unwrap(), 1);
    assert_eq!(store.unprocessed_deliveries(10).await.unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// deliveries

async fn duplicate_delivery_is_a_no_op(db: TestDb) {
    let store = db.open().await;
    assert_eq!(
        store
            .insert_delivery(&delivery("d-1", b"first"))
            .await
            .unwrap(),
        Inserted::New
    );
    let mut again = delivery("d-1", b"second");
    again.event = "check_run".into();
    assert_eq!(
        store.insert_delivery(&again).await.unwrap(),
        Inserted::Duplicate
    );

    let stored = store.get_delivery("d-1").await.unwrap().unwrap();
    assert_eq!(
        (stored.event.as_str(), stored.payload.as_slice()),
        ("pull_request", &b"first"[..])
    );
    assert_eq!(store.unprocessed_deliveries(10).await.unwrap().len(), 1);

    // Still a duplicate once processed.
    assert!(store.mark_delivery_processed("d-1", None).await.unwrap());
    assert_eq!(
        store.insert_delivery(&again).await.unwrap(),
        Inserted::Duplicate
    );
    assert!(store.unprocessed_deliveries(10).await.unwrap().is_empty());
    store.close().await;
}

/// Every byte value, including NUL and invalid UTF-8.
fn binary_payload() -> Vec<u8> {
    (0..=255u8).chain(*b"{\"action\":\"opened\"}").collect()
}

async fn delivery_survives_reopen(db: TestDb) {
    let store = db.open().await;
    let payload = binary_payload();
    assert_eq!(
        store
            .insert_delivery(&delivery("d-keep", &payload))
            .await
            .unwrap(),
        Inserted::New
    );
    store.close().await;
    drop(store);

    let store = db.open().await;
    let stored = store
        .get_delivery("d-keep")
        .await
        .unwrap()
        .expect("the delivery is still there");
    assert_eq!(stored.payload, payload);
    assert_eq!(stored.action.as_deref(), Some("opened"));
    assert_eq!(stored.processed_at, None);
    assert_eq!(
        store.unprocessed_deliveries(10).await.unwrap(),
        vec![stored]
    );
    store.close().await;
}

const CRASH_URL: &str = "INFRADEV_STORE_TEST_CRASH_URL";

/// Helper for `delivery_survives_a_crash_of_the_writer`: does nothing unless that test runs this
/// binary again with `INFRADEV_STORE_TEST_CRASH_URL` set; then stores a delivery and aborts at
/// once, closing nothing.
#[tokio::test]
async fn crash_child_helper() {
    let Ok(url) = std::env::var(CRASH_URL) else {
        return;
    };
    let store = Store::open(&url).await.unwrap();
    assert_eq!(
        store
            .insert_delivery(&delivery("d-crash", &binary_payload()))
            .await
            .unwrap(),
        Inserted::New
    );
    std::process::abort();
}

async fn delivery_survives_a_crash_of_the_writer(db: TestDb) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_URL, &db.url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child was meant to abort: {status}");

    let store = db.open().await;
    let stored = store
        .get_delivery("d-crash")
        .await
        .unwrap()
        .expect("the acknowledged delivery survived");
    assert_eq!(stored.payload, binary_payload());
    store.close().await;
}

async fn unprocessed_deliveries_in_received_order(db: TestDb) {
    let store = db.open().await;
    for id in ["d-c", "d-a", "d-b", "d-d"] {
        store.insert_delivery(&delivery(id, b"{}")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let ids = |ds: Vec<Delivery>| ds.into_iter().map(|d| d.delivery_id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.unprocessed_deliveries(10).await.unwrap()),
        ["d-c", "d-a", "d-b", "d-d"]
    );
    assert_eq!(
        ids(store.unprocessed_deliveries(2).await.unwrap()),
        ["d-c", "d-a"]
    );

    assert!(
        store
            .mark_delivery_processed("d-a", Some("cannot parse"))
            .await
            .unwrap()
    );
    assert!(store.mark_delivery_processed("d-c", None).await.unwrap());
    assert!(
        !store
            .mark_delivery_processed("d-unknown", None)
            .await
            .unwrap()
    );
    assert_eq!(
        ids(store.unprocessed_deliveries(10).await.unwrap()),
        ["d-b", "d-d"]
    );

    let failed = store.get_delivery("d-a").await.unwrap().unwrap();
    assert_eq!(failed.error.as_deref(), Some("cannot parse"));
    let processed_at = failed.processed_at.expect("processed_at");
    assert!(processed_at >= failed.received_at);

    // Pruning removes processed deliveries only.
    assert_eq!(
        store
            .prune_deliveries(Utc::now() + chrono::Duration::seconds(1))
            .await
            .unwrap(),
        2
    );
    assert!(store.get_delivery("d-a").await.unwrap().is_none());
    assert_eq!(
        ids(store.unprocessed_deliveries(10).await.unwrap()),
        ["d-b", "d-d"]
    );
    store.close().await;
}

// ---------------------------------------------------------------------------------------------
// pull requests and heads

async fn pulls_and_heads(db: TestDb) {
    let store = db.open().await;
    assert_eq!(store.get_pull(REPO, 7).await.unwrap(), None);
    assert!(!store.set_sticky_comment_id(REPO, 7, Some(1)).await.unwrap());
    assert!(!store.set_grade_requested(REPO, 7, true).await.unwrap());

    let stored = store.upsert_pull(&pull(7, "sha-1")).await.unwrap();
    assert_eq!(
        (
            stored.number,
            stored.head_sha.as_str(),
            stored.installation_id
        ),
        (7, "sha-1", 77)
    );
    assert!(stored.is_agent && stored.open && !stored.draft && !stored.grade_requested);
    assert_eq!(stored.sticky_comment_id, None);
    assert_eq!(store.get_pull(REPO, 7).await.unwrap(), Some(stored));

    // GitHub ids beyond 2^32 round-trip.
    let big = 9_007_199_254_740_993u64;
    assert!(
        store
            .set_sticky_comment_id(REPO, 7, Some(big))
            .await
            .unwrap()
    );
    assert!(store.set_grade_requested(REPO, 7, true).await.unwrap());

    // An update from a webhook keeps the sticky comment and the grade request.
    let mut update = pull(7, "sha-2");
    update.draft = true;
    update.task_id = None;
    let updated = store.upsert_pull(&update).await.unwrap();
    assert_eq!(updated.head_sha, "sha-2");
    assert!(updated.draft);
    assert_eq!(updated.task_id, None);
    assert_eq!(updated.sticky_comment_id, Some(big));
    assert!(updated.grade_requested);
    assert!(store.set_sticky_comment_id(REPO, 7, None).await.unwrap());
    assert_eq!(
        store
            .get_pull(REPO, 7)
            .await
            .unwrap()
            .unwrap()
            .sticky_comment_id,
        None
    );

    // An id that does not fit a signed 64-bit column is refused, not wrapped.
    let err = store.get_pull(REPO, u64::MAX).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid { .. }) && !err.is_transient(),
        "{err:?}"
    );

    // Heads.
    assert!(
        store
            .pulls_for_head(REPO, "sha-2")
            .await
            .unwrap()
            .is_empty()
    );
    store.index_head(REPO, "sha-2", 7).await.unwrap();
    store.index_head(REPO, "sha-2", 7).await.unwrap();
    store.index_head(REPO, "sha-2", 3).await.unwrap();
    store.index_head("other/repo", "sha-2", 9).await.unwrap();
    assert_eq!(store.pulls_for_head(REPO, "sha-2").await.unwrap(), [3, 7]);
    assert_eq!(
        store.pulls_for_head("other/repo", "sha-2").await.unwrap(),
        [9]
    );
    store.close().await;
}

// ---------------------------------------------------------------------------------------------
// jobs

async fn superseded_and_withdrawn_jobs_are_cancelled(db: TestDb) {
    let store = db.open().await;
    let a = store
        .enqueue_job(REPO, 7, "sha-1", "t", 77)
        .await
        .unwrap()
        .job;
    let other_pull = store
        .enqueue_job(REPO, 8, "sha-1", "t", 77)
        .await
        .unwrap()
        .job;
    // The pull request is still (sha-1, t): nothing is superseded.
    let none = store
        .supersede_jobs(REPO, 7, "sha-1", Some("t"))
        .await
        .unwrap();
    assert!(none.is_empty());
    // It names another task now: the job of the old one is superseded; another pull
    // request's job on the same commit is not.
    let by_task = store
        .supersede_jobs(REPO, 7, "sha-1", Some("t2"))
        .await
        .unwrap();
    assert_eq!(by_task.iter().map(|j| j.id).collect::<Vec<_>>(), [a.id]);
    let b = store
        .enqueue_job(REPO, 7, "sha-1", "t2", 77)
        .await
        .unwrap()
        .job;
    // It names no task: every active job of it is.
    let by_none = store.supersede_jobs(REPO, 7, "sha-1", None).await.unwrap();
    assert_eq!(by_none.iter().map(|j| j.id).collect::<Vec<_>>(), [b.id]);
    let c = store
        .enqueue_job(REPO, 7, "sha-2", "t", 77)
        .await
        .unwrap()
        .job;
    // Back to the old head: the new head's job is.
    let by_head = store
        .supersede_jobs(REPO, 7, "sha-1", Some("t"))
        .await
        .unwrap();
    assert_eq!(by_head.iter().map(|j| j.id).collect::<Vec<_>>(), [c.id]);
    assert_eq!(
        store
            .jobs_for_head(REPO, "sha-1")
            .await
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect::<Vec<_>>(),
        [a.id, other_pull.id, b.id]
    );

    // The App loses a repository, then the installation: their active jobs are cancelled,
    // another installation's are not.
    let elsewhere = store
        .enqueue_job("other/repo", 1, "sha-9", "t", 77)
        .await
        .unwrap()
        .job;
    let foreign = store
        .enqueue_job("third/repo", 1, "sha-9", "t", 88)
        .await
        .unwrap()
        .job;
    let removed = store
        .cancel_jobs_for_installation(77, &[REPO.to_uppercase()])
        .await
        .unwrap();
    assert_eq!(
        removed.iter().map(|j| j.id).collect::<Vec<_>>(),
        [other_pull.id]
    );
    let deleted = store.cancel_jobs_for_installation(77, &[]).await.unwrap();
    assert_eq!(
        deleted.iter().map(|j| j.id).collect::<Vec<_>>(),
        [elsewhere.id]
    );
    assert_eq!(
        store.get_job(foreign.id).await.unwrap().unwrap().state,
        JobState::Queued
    );
    assert_eq!(store.installation_active(77).await.unwrap(), None);
    store.set_installation(77, false).await.unwrap();
    assert_eq!(store.installation_active(77).await.unwrap(), Some(false));
}

async fn enqueue_cancels_older_heads_and_is_idempotent(db: TestDb) {
    let store = db.open().await;
    let first = store.enqueue_job(REPO, 7, "sha-1", "t", 77).await.unwrap();
    assert!(first.created && first.cancelled.is_empty());
    let a = first.job;
    assert_eq!(
        (a.state, a.attempts, a.head_sha.as_str(), a.installation_id),
        (JobState::Queued, 0, "sha-1", 77)
    );
    // Another pull request's job is never touched.
    let other = store
        .enqueue_job(REPO, 8, "sha-x", "t", 77)
        .await
        .unwrap()
        .job;

    // Same (pull, head, task): the same job.
    let again = store.enqueue_job(REPO, 7, "sha-1", "t", 77).await.unwrap();
    assert_eq!(
        (again.job.id, again.created, again.cancelled.len()),
        (a.id, false, 0)
    );

    // A new head cancels the old one's job and returns it.
    let second = store.enqueue_job(REPO, 7, "sha-2", "t", 77).await.unwrap();
    assert!(second.created);
    assert_eq!(
        second.cancelled.iter().map(|j| j.id).collect::<Vec<_>>(),
        [a.id]
    );
    assert_eq!(second.cancelled[0].state, JobState::Cancelled);
    assert_eq!(
        store.get_job(a.id).await.unwrap().unwrap().state,
        JobState::Cancelled
    );
    let b = second.job;
    assert!(b.id > a.id);

    // Still idempotent while running.
    let claimed = store.claim_job("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, other.id, "oldest first");
    let claimed = store.claim_job("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, b.id);
    let again = store.enqueue_job(REPO, 7, "sha-2", "t", 77).await.unwrap();
    assert_eq!(
        (again.job.id, again.job.state, again.created),
        (b.id, JobState::Running, false)
    );

    // Another task on the same head (the pull request names it now) supersedes the old
    // task's job; its worker's finish is then refused.
    let c = store.enqueue_job(REPO, 7, "sha-2", "t2", 77).await.unwrap();
    assert!(c.created);
    assert_eq!(c.cancelled.iter().map(|j| j.id).collect::<Vec<_>>(), [b.id]);
    assert!(
        !store
            .finish_job(b.id, "w1", "resolved", "{}")
            .await
            .unwrap()
    );
    let active: Vec<JobId> = store
        .active_jobs_for_pull(REPO, 7)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(active, [c.job.id]);

    // A finished job does not block a regrade of the same head.
    let claimed = store.claim_job("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, c.job.id);
    assert!(
        store
            .finish_job(c.job.id, "w1", "resolved", "{}")
            .await
            .unwrap()
    );
    let regrade = store.enqueue_job(REPO, 7, "sha-2", "t2", 77).await.unwrap();
    assert!(regrade.created && regrade.job.id > c.job.id);

    // A job of an old head is cancelled too.
    let d = store.enqueue_job(REPO, 7, "sha-3", "t", 77).await.unwrap();
    let cancelled: Vec<JobId> = d.cancelled.iter().map(|j| j.id).collect();
    assert_eq!(cancelled, [regrade.job.id]);

    assert_eq!(
        store.get_job(other.id).await.unwrap().unwrap().state,
        JobState::Running
    );
    let counts = store.count_jobs_by_state().await.unwrap();
    assert_eq!(
        counts,
        JobCounts {
            queued: 1,
            running: 1,
            finished: 1,
            cancelled: 3
        }
    );
    assert_eq!(store.jobs_for_pull(REPO, 7).await.unwrap().len(), 5);

    // Closing the pull request cancels what is left.
    let closed = store.cancel_jobs_for_pull(REPO, 7).await.unwrap();
    assert_eq!(closed.iter().map(|j| j.id).collect::<Vec<_>>(), [d.job.id]);
    assert!(
        store
            .active_jobs_for_pull(REPO, 7)
            .await
            .unwrap()
            .is_empty()
    );
    store.close().await;
}

async fn concurrent_enqueues_of_one_pull_leave_one_active_job(db: TestDb) {
    let store = db.open().await;
    // Eight processors enqueue the same head at once: one job.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.enqueue_job(REPO, 7, "sha-1", "t", 77).await
        }));
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    for task in tasks {
        let enqueued = task.await.unwrap().unwrap();
        ids.insert(enqueued.job.id);
        created += usize::from(enqueued.created);
    }
    assert_eq!((ids.len(), created), (1, 1));

    // Eight different heads at once: exactly one job stays active, the others are cancelled.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .enqueue_job(REPO, 9, &format!("sha-{i}"), "t", 77)
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let active = store.active_jobs_for_pull(REPO, 9).await.unwrap();
    assert_eq!(active.len(), 1, "{active:#?}");
    let counts = store.count_jobs_by_state().await.unwrap();
    assert_eq!((counts.queued, counts.cancelled), (2, 7));
    store.close().await;
}

async fn concurrent_claimers_never_get_the_same_job(db: TestDb) {
    let store = db.open().await;
    let mut enqueued = HashSet::new();
    for number in 1..=20 {
        enqueued.insert(
            store
                .enqueue_job(REPO, number, &format!("sha-{number}"), "t", 77)
                .await
                .unwrap()
                .job
                .id,
        );
    }
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("worker-{worker}");
            let mut mine = Vec::new();
            while let Some(job) = store.claim_job(&owner, LEASE).await.unwrap() {
                assert_eq!(job.lease_owner.as_deref(), Some(owner.as_str()));
                mine.push(job.id);
                tokio::task::yield_now().await;
            }
            (owner, mine)
        }));
    }
    let mut claimed_by: HashMap<JobId, String> = HashMap::new();
    for task in tasks {
        let (owner, mine) = task.await.unwrap();
        for id in mine {
            if let Some(previous) = claimed_by.insert(id, owner.clone()) {
                panic!("job {id} claimed by {previous} and {owner}");
            }
        }
    }
    assert_eq!(claimed_by.keys().copied().collect::<HashSet<_>>(), enqueued);
    for (id, owner) in &claimed_by {
        let job = store.get_job(*id).await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.attempts, job.lease_owner.as_ref()),
            (JobState::Running, 1, Some(owner))
        );
    }
    assert_eq!(store.count_jobs_by_state().await.unwrap().running, 20);
    store.close().await;
}

async fn expired_lease_is_reclaimed_and_the_old_owner_is_refused(db: TestDb) {
    let store = db.open().await;
    let id = store
        .enqueue_job(REPO, 7, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    let short = Duration::from_secs(1);
    let first = store.claim_job("w1", short).await.unwrap().unwrap();
    assert_eq!(
        (first.id, first.attempts, first.state),
        (id, 1, JobState::Running)
    );
    let until = first.lease_until.unwrap();
    assert!(until > Utc::now() && until <= Utc::now() + chrono::Duration::seconds(1));

    // A live lease is not taken; a renewed one neither.
    assert!(store.claim_job("w2", short).await.unwrap().is_none());
    assert!(store.renew_lease(id, "w1", short).await.unwrap());
    assert!(!store.renew_lease(id, "w2", short).await.unwrap());

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = store
        .claim_job("w2", LEASE)
        .await
        .unwrap()
        .expect("the lapsed lease is reclaimed");
    assert_eq!(
        (second.id, second.attempts, second.lease_owner.as_deref()),
        (id, 2, Some("w2"))
    );

    // The old owner finds out: no renewal, no result, no failure, no release.
    assert!(!store.renew_lease(id, "w1", LEASE).await.unwrap());
    assert!(
        !store
            .finish_job(id, "w1", "unresolved", "{\"old\":true}")
            .await
            .unwrap()
    );
    assert!(!store.fail_job(id, "w1", "late").await.unwrap());
    assert!(!store.release_job(id, "w1", None).await.unwrap());

    assert!(
        store
            .finish_job(id, "w2", "resolved", "{\"ok\":true}")
            .await
            .unwrap()
    );
    let done = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Finished);
    assert_eq!(
        (done.verdict.as_deref(), done.result_json.as_deref()),
        (Some("resolved"), Some("{\"ok\":true}"))
    );
    assert_eq!(done.lease_until, None);
    // Finished is final.
    assert!(
        !store
            .finish_job(id, "w2", "unresolved", "{}")
            .await
            .unwrap()
    );
    assert!(store.claim_job("w3", LEASE).await.unwrap().is_none());

    // A released job goes back to the queue; a failed one finishes without a verdict.
    let id = store
        .enqueue_job(REPO, 8, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    store.claim_job("w1", LEASE).await.unwrap().unwrap();
    assert!(
        store
            .release_job(id, "w1", Some("clone failed"))
            .await
            .unwrap()
    );
    let released = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(
        (
            released.state,
            released.lease_owner,
            released.error.as_deref()
        ),
        (JobState::Queued, None, Some("clone failed"))
    );
    let again = store.claim_job("w2", LEASE).await.unwrap().unwrap();
    assert_eq!((again.id, again.attempts), (id, 2));
    assert!(store.fail_job(id, "w2", "gave up").await.unwrap());
    let failed = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(
        (failed.state, failed.verdict, failed.error.as_deref()),
        (JobState::Finished, None, Some("gave up"))
    );
    store.close().await;
}

async fn cancelled_job_refuses_finish_and_renewal(db: TestDb) {
    let store = db.open().await;
    let id = store
        .enqueue_job(REPO, 7, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    store.claim_job("w1", LEASE).await.unwrap().unwrap();
    assert!(store.set_check_run_id(id, 4_294_967_297).await.unwrap());
    let cancelled = store.cancel_job(id).await.unwrap().expect("it was running");
    assert_eq!(
        (cancelled.state, cancelled.check_run_id),
        (JobState::Cancelled, Some(4_294_967_297))
    );
    assert!(
        store.cancel_job(id).await.unwrap().is_none(),
        "already cancelled"
    );
    assert!(!store.renew_lease(id, "w1", LEASE).await.unwrap());
    assert!(!store.finish_job(id, "w1", "resolved", "{}").await.unwrap());
    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().state,
        JobState::Cancelled
    );
    assert!(
        store.claim_job("w2", LEASE).await.unwrap().is_none(),
        "a cancelled job is never claimed"
    );
    assert_eq!(store.get_job(JobId(id.0 + 1000)).await.unwrap(), None);
    store.close().await;
}

async fn transactions_that_read_first_do_not_fail_under_concurrency(db: TestDb) {
    // A transaction that reads, then writes, while others write (on SQLite a deferred
    // transaction would fail with SQLITE_BUSY_SNAPSHOT instead of waiting).
    let store = db.open().await;
    let id = store
        .enqueue_job(REPO, 7, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = store.begin().await?;
            let job = tx.get_job(id).await?.expect("the job");
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert_eq!(job.id, id);
            assert!(tx.set_check_run_id(id, 100 + i).await?);
            tx.push_outbox(&report(id, "note")).await?;
            tx.commit().await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let check_run_id = store
        .get_job(id)
        .await
        .unwrap()
        .unwrap()
        .check_run_id
        .unwrap();
    assert!((100..108).contains(&check_run_id));
    assert_eq!(store.pending_outbox_count().await.unwrap(), 8);
    store.close().await;
}

// ---------------------------------------------------------------------------------------------
// outbox

fn report(job: JobId, kind: &str) -> NewOutbox {
    NewOutbox {
        job_id: Some(job),
        kind: kind.into(),
        payload: json!({ "job": job.0, "kind": kind, "text": "ünï" }),
    }
}

async fn outbox_rows_commit_atomically_with_the_job_change(db: TestDb) {
    let store = db.open().await;
    let id = store
        .enqueue_job(REPO, 7, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    store.claim_job("w1", LEASE).await.unwrap().unwrap();

    // Rolled back: neither the finish nor the report.
    let mut tx = store.begin().await.unwrap();
    assert!(tx.finish_job(id, "w1", "resolved", "{}").await.unwrap());
    tx.push_outbox(&report(id, "check_run_completed"))
        .await
        .unwrap();
    assert_eq!(
        tx.outbox_for_job(id).await.unwrap().len(),
        1,
        "visible inside the transaction"
    );
    tx.rollback().await.unwrap();
    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().state,
        JobState::Running
    );
    assert!(store.outbox_for_job(id).await.unwrap().is_empty());
    assert_eq!(store.pending_outbox_count().await.unwrap(), 0);

    // Dropped without commit: the same.
    {
        let mut tx = store.begin().await.unwrap();
        assert!(tx.finish_job(id, "w1", "resolved", "{}").await.unwrap());
        tx.push_outbox(&report(id, "check_run_completed"))
            .await
            .unwrap();
    }
    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().state,
        JobState::Running
    );
    assert_eq!(store.pending_outbox_count().await.unwrap(), 0);

    // Committed: both, and nobody sees either before the commit.
    let mut tx = store.begin().await.unwrap();
    assert!(
        tx.finish_job(id, "w1", "unresolved", "{\"n\":1}")
            .await
            .unwrap()
    );
    let first = tx
        .push_outbox(&report(id, "check_run_completed"))
        .await
        .unwrap();
    let second = tx.push_outbox(&report(id, "sticky_comment")).await.unwrap();
    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().state,
        JobState::Running
    );
    assert_eq!(store.pending_outbox_count().await.unwrap(), 0);
    tx.commit().await.unwrap();

    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().verdict.as_deref(),
        Some("unresolved")
    );
    let rows = store.outbox_for_job(id).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.id).collect::<Vec<_>>(),
        [first, second]
    );
    assert_eq!(rows[0].payload, report(id, "check_run_completed").payload);
    assert_eq!(
        (rows[0].state, rows[0].attempts, rows[0].kind.as_str()),
        (OutboxState::Pending, 0, "check_run_completed")
    );
    assert_eq!(store.pending_outbox_count().await.unwrap(), 2);

    // Enqueue and its reports in one transaction, too.
    let mut tx = store.begin().await.unwrap();
    let next = tx.enqueue_job(REPO, 7, "sha-2", "t", 77).await.unwrap();
    tx.push_outbox(&report(next.job.id, "check_run_queued"))
        .await
        .unwrap();
    drop(tx);
    assert!(store.get_job(next.job.id).await.unwrap().is_none());
    assert_eq!(store.pending_outbox_count().await.unwrap(), 2);
    store.close().await;
}

async fn due_outbox_respects_next_attempt_at_and_job_order(db: TestDb) {
    let store = db.open().await;
    let j1 = store
        .enqueue_job(REPO, 1, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    let j2 = store
        .enqueue_job(REPO, 2, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    let r1 = store
        .push_outbox(&report(j1, "check_run_created"))
        .await
        .unwrap();
    let r2 = store
        .push_outbox(&report(j1, "check_run_completed"))
        .await
        .unwrap();
    let r3 = store
        .push_outbox(&report(j2, "check_run_created"))
        .await
        .unwrap();
    let r4 = store
        .push_outbox(&NewOutbox {
            job_id: None,
            kind: "note".into(),
            payload: json!(null),
        })
        .await
        .unwrap();
    let now = Utc::now();
    let secs = |s: i64| now + chrono::Duration::seconds(s);
    let due = |rows: Vec<OutboxRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();

    // r2 waits behind r1, the earlier pending row of the same job.
    assert_eq!(due(store.due_outbox(now, 10).await.unwrap()), [r1, r3, r4]);
    assert_eq!(due(store.due_outbox(now, 2).await.unwrap()), [r1, r3]);
    assert!(
        store
            .due_outbox(now - chrono::Duration::seconds(5), 10)
            .await
            .unwrap()
            .is_empty(),
        "pushed now"
    );

    // A retry later is not due before its time, and still holds r2 back.
    assert!(
        store
            .retry_outbox(r1, secs(60), "502 Bad Gateway")
            .await
            .unwrap()
    );
    assert_eq!(due(store.due_outbox(now, 10).await.unwrap()), [r3, r4]);
    assert_eq!(due(store.due_outbox(secs(59), 10).await.unwrap()), [r3, r4]);
    assert_eq!(
        due(store.due_outbox(secs(60), 10).await.unwrap()),
        [r1, r3, r4]
    );
    let retried = store.get_outbox(r1).await.unwrap().unwrap();
    assert_eq!(
        (retried.attempts, retried.last_error.as_deref()),
        (1, Some("502 Bad Gateway"))
    );
    assert_eq!(
        retried.next_attempt_at.timestamp_micros(),
        secs(60).timestamp_micros()
    );

    // Done releases the next row of the job; dead rows are skipped and stop blocking.
    assert!(store.complete_outbox(r1).await.unwrap());
    assert!(!store.complete_outbox(r1).await.unwrap(), "already done");
    assert!(
        !store.retry_outbox(r1, now, "x").await.unwrap(),
        "done is final"
    );
    assert_eq!(due(store.due_outbox(now, 10).await.unwrap()), [r2, r3, r4]);
    assert!(store.dead_outbox(r3, "422 Unprocessable").await.unwrap());
    assert!(!store.dead_outbox(r3, "again").await.unwrap());
    assert_eq!(due(store.due_outbox(now, 10).await.unwrap()), [r2, r4]);
    assert_eq!(store.pending_outbox_count().await.unwrap(), 2);

    let done = store.get_outbox(r1).await.unwrap().unwrap();
    assert_eq!(
        (done.state, done.attempts, done.last_error),
        (OutboxState::Done, 2, None)
    );
    let dead = store.get_outbox(r3).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.attempts, dead.last_error.as_deref()),
        (OutboxState::Dead, 1, Some("422 Unprocessable"))
    );
    assert_eq!(
        store.get_outbox(r4).await.unwrap().unwrap().payload,
        json!(null)
    );
    store.close().await;
}

async fn claim_outbox_hides_claimed_rows(db: TestDb) {
    let store = db.open().await;
    let j1 = store
        .enqueue_job(REPO, 1, "sha-1", "t", 77)
        .await
        .unwrap()
        .job
        .id;
    let r1 = store.push_outbox(&report(j1, "a")).await.unwrap();
    let r2 = store.push_outbox(&report(j1, "b")).await.unwrap();
    let r3 = store
        .push_outbox(&NewOutbox {
            job_id: None,
            kind: "c".into(),
            payload: json!({}),
        })
        .await
        .unwrap();
    let now = Utc::now();
    let ids = |rows: Vec<OutboxRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let lease = Duration::from_secs(30);

    // Two deliverers at once never get the same row.
    let (a, b) = tokio::join!(
        store.claim_outbox(now, lease, 10),
        store.claim_outbox(now, lease, 10)
    );
    let (a, b) = (ids(a.unwrap()), ids(b.unwrap()));
    let mut all: Vec<OutboxId> = a.iter().chain(&b).copied().collect();
    all.sort();
    assert_eq!(all, [r1, r3], "claimed {a:?} and {b:?}");
    assert!(store.claim_outbox(now, lease, 10).await.unwrap().is_empty());

    // Unfinished claims come back after the lease; r2 still waits for r1.
    let later = now + chrono::Duration::seconds(31);
    assert_eq!(
        ids(store.claim_outbox(later, lease, 10).await.unwrap()),
        [r1, r3]
    );
    assert!(store.complete_outbox(r1).await.unwrap());
    assert_eq!(
        ids(store.claim_outbox(later, lease, 10).await.unwrap()),
        [r2]
    );
    store.close().await;
}

// ---------------------------------------------------------------------------------------------
// remote backends

/// A queued job routed to `backend`.
async fn remote_job(store: &Store, number: u64, backend: &str) -> Job {
    let job = store
        .enqueue_job("o/r", number, &format!("{number:040x}"), "t", 1)
        .await
        .unwrap()
        .job;
    assert!(store.set_job_backend(job.id, backend).await.unwrap());
    job
}

async fn remote_jobs_are_claimed_only_by_their_backend_and_only_when_due(db: TestDb) {
    let store = db.open().await;
    let local = store
        .enqueue_job("o/r", 1, &"a".repeat(40), "t", 1)
        .await
        .unwrap()
        .job;
    let slurm = remote_job(&store, 2, "slurm").await;
    let until = Utc::now() + chrono::Duration::hours(1);

    // The local workers never take a remote job, nor a remote dispatcher a local one.
    let claimed = store
        .claim_job("w", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, local.id);
    assert!(
        store
            .claim_job("w", Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .claim_dispatch("github-actions", until)
            .await
            .unwrap()
            .is_none()
    );
    let d1 = store.claim_dispatch("slurm", until).await.unwrap().unwrap();
    assert_eq!((d1.id, d1.dispatches, d1.remote_open), (slurm.id, 1, true));
    assert_eq!(d1.lease_owner.as_deref(), Some("remote:slurm"));
    assert!(
        store
            .claim_dispatch("slurm", until)
            .await
            .unwrap()
            .is_none()
    );

    // The engine was unreachable: back in the queue, not claimable before its backoff ends.
    let due = Utc::now() + chrono::Duration::milliseconds(700);
    let requeued = store
        .requeue_remote(slurm.id, 1, false, "controller down", Some(due))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((requeued.lost_runs, requeued.remote_open), (0, false));
    assert!(
        store
            .claim_dispatch("slurm", until)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .requeue_remote(slurm.id, 1, false, "twice", None)
            .await
            .unwrap()
            .is_none(),
        "only the running dispatch can be requeued"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Once due, the next dispatch is number 2; the engine id is recorded against it only.
    let d2 = store.claim_dispatch("slurm", until).await.unwrap().unwrap();
    assert_eq!(d2.dispatches, 2);
    assert!(
        store
            .set_external_id(slurm.id, 1, "17", until)
            .await
            .unwrap()
            .is_none()
    );
    let recorded = store
        .set_external_id(slurm.id, 2, "18", until)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorded.external_id.as_deref(), Some("18"));
    assert_eq!(
        ids_of(store.open_remote_jobs("slurm").await.unwrap()),
        [slurm.id]
    );
    // Lost: counted, requeued at once; the dispatch is closed.
    let lost = store
        .requeue_remote(slurm.id, 2, true, "NODE_FAIL", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lost.lost_runs, 1);
    assert!(store.open_remote_jobs("slurm").await.unwrap().is_empty());
    assert_eq!(
        store
            .jobs_by_external_id("slurm", "18")
            .await
            .unwrap()
            .len(),
        0,
        "the engine id goes with the dispatch"
    );
    store.close().await;
}

fn ids_of(jobs: Vec<Job>) -> Vec<JobId> {
    jobs.into_iter().map(|j| j.id).collect()
}

async fn result_tokens_are_hashed_single_use_and_expire(db: TestDb) {
    use infradev::service::app::results::{Answer, ResultError, receive};
    use infradev::service::backend::token;

    let store = db.open().await;
    let job = remote_job(&store, 3, "slurm").await;
    let until = Utc::now() + chrono::Duration::hours(1);
    let claimed = store.claim_dispatch("slurm", until).await.unwrap().unwrap();
    let (good, stale) = ("a".repeat(64), "b".repeat(64));
    store
        .insert_job_token(job.id, 1, &token::hash(&good), until)
        .await
        .unwrap();
    store
        .insert_job_token(
            job.id,
            1,
            &token::hash(&stale),
            Utc::now() - chrono::Duration::seconds(1),
        )
        .await
        .unwrap();
    assert_eq!(claimed.dispatches, 1);
    let body = serde_json::to_vec(
        &json!({"job_id": job.id.0, "dispatch": 1, "error": "task error: no such task"}),
    )
    .unwrap();

    let refused = |r: Result<Answer, ResultError>| match r {
        Err(ResultError::Unauthorized(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    assert!(refused(receive(&store, job.id.0, None, &body).await).contains("no bearer"));
    assert!(
        refused(receive(&store, job.id.0, Some(&"c".repeat(64)), &body).await)
            .contains("no such token")
    );
    assert!(
        refused(receive(&store, job.id.0 + 1, Some(&good), &body).await).contains("no such token")
    );
    assert!(refused(receive(&store, job.id.0, Some(&stale), &body).await).contains("expired"));
    let other_job = serde_json::to_vec(&json!({"job_id": job.id.0 + 1, "dispatch": 1})).unwrap();
    assert!(matches!(
        receive(&store, job.id.0, Some(&good), &other_job).await,
        Err(ResultError::BadBody(_))
    ));

    // The good token once: accepted (a task error is the task's, reported as such). Again: a
    // duplicate that changes nothing.
    assert_eq!(
        receive(&store, job.id.0, Some(&good), &body).await.unwrap(),
        Answer::Accepted
    );
    assert_eq!(
        receive(&store, job.id.0, Some(&good), &body).await.unwrap(),
        Answer::Duplicate
    );
    let done = store.get_job(job.id).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Finished);
    assert!(!done.remote_open);
    assert_eq!(done.error.as_deref(), Some("task error: no such task"));
    let results = store.job_results(job.id).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].disposition, Disposition::Accepted);
    // The conclusion is queued with the finish, in one transaction.
    let kinds: Vec<String> = store
        .outbox_for_job(job.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.kind)
        .collect();
    assert!(kinds.iter().any(|k| k == "check_completed"), "{kinds:?}");
    // Only the token's hash is stored.
    assert!(store.find_job_token(job.id, &good).await.unwrap().is_none());
    assert!(
        store
            .find_job_token(job.id, &token::hash(&good))
            .await
            .unwrap()
            .is_some()
    );
    store.close().await;
}
