//! The store's grade queries (migration 0004) on SQLite and PostgreSQL: when a job finished
//! and whose grade it is, a pull request's grade history, the finished grades the statistics
//! read, and the queue per backend. Like tests/store.rs, the PostgreSQL half runs on the
//! cluster named by `INFRADEV_TEST_PG_URL` and fails under `CI=true` without it.

use std::time::Duration;

mod support;

use chrono::Utc;
use infradev::service::store::*;

async fn sqlite() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    (Store::open(&url).await.unwrap(), dir)
}

/// A fresh database on the test cluster, or `None` (loudly; a failure under CI=true).
async fn postgres() -> Option<Store> {
    let url = support::story::postgres_database()?;
    Some(Store::open(&url).await.unwrap())
}

fn pull(number: u64, author: &str) -> PullUpsert {
    PullUpsert {
        repo: "o/r".into(),
        number,
        head_sha: format!("{number:040}"),
        base_ref: "main".into(),
        task_id: Some("t".into()),
        is_agent: true,
        author: author.into(),
        installation_id: 1,
        draft: false,
        open: true,
    }
}

async fn graded(store: &Store, number: u64, head: &str, result: Result<&str, &str>) -> JobId {
    let job = store
        .enqueue_job("o/r", number, head, "t", 1)
        .await
        .unwrap()
        .job;
    let claimed = store
        .claim_job("w", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, job.id);
    let done = match result {
        Ok(json) => store.finish_job(job.id, "w", "resolved", json).await,
        Err(error) => store.fail_job(job.id, "w", error).await,
    };
    assert!(done.unwrap());
    job.id
}

async fn grades(store: Store) {
    let info = store.info().await.unwrap();
    assert!(info.schema_version >= 4, "{info:?}");
    store.upsert_pull(&pull(1, "alpha[bot]")).await.unwrap();
    store.upsert_pull(&pull(2, "beta[bot]")).await.unwrap();
    let before = Utc::now();
    let a = graded(&store, 1, "a1", Ok("{\"x\":1}")).await;
    // The PR's author changes (a transfer): the grade keeps the author it was graded for.
    let b = graded(&store, 1, "a2", Err("infrastructure error: docker")).await;
    store.upsert_pull(&pull(1, "gamma[bot]")).await.unwrap();
    let c = graded(&store, 2, "b1", Ok("{\"x\":2}")).await;
    let queued = store.enqueue_job("o/r", 2, "b2", "t", 1).await.unwrap().job;
    assert!(store.set_job_backend(queued.id, "slurm").await.unwrap());

    let ga = store.graded_job(a).await.unwrap().unwrap();
    assert_eq!(ga.author.as_deref(), Some("alpha[bot]"));
    assert!(ga.finished_at.unwrap() >= before);
    assert_eq!(ga.job.result_json.as_deref(), Some("{\"x\":1}"));
    let gb = store.graded_job(b).await.unwrap().unwrap();
    assert_eq!(gb.author.as_deref(), Some("alpha[bot]"));
    assert_eq!(
        gb.job.error.as_deref(),
        Some("infrastructure error: docker")
    );
    let gq = store.graded_job(queued.id).await.unwrap().unwrap();
    assert_eq!((gq.finished_at, gq.author), (None, None), "not finished");
    assert!(store.graded_job(JobId(999_999)).await.unwrap().is_none());

    let history: Vec<JobId> = store
        .graded_jobs_for_pull("o/r", 2)
        .await
        .unwrap()
        .iter()
        .map(|g| g.job.id)
        .collect();
    assert_eq!(history, [c, queued.id]);

    let finished: Vec<JobId> = store
        .finished_jobs(None, 100)
        .await
        .unwrap()
        .iter()
        .map(|g| g.job.id)
        .collect();
    assert_eq!(finished, [a, b, c], "oldest first, unfinished left out");
    let newest: Vec<JobId> = store
        .finished_jobs(None, 2)
        .await
        .unwrap()
        .iter()
        .map(|g| g.job.id)
        .collect();
    assert_eq!(newest, [b, c], "the newest, oldest first");
    let later = store
        .finished_jobs(Some(Utc::now() + chrono::Duration::hours(1)), 100)
        .await
        .unwrap();
    assert!(later.is_empty());

    let backends = store.count_jobs_by_backend().await.unwrap();
    assert_eq!(
        backends,
        [
            BackendCounts {
                backend: "local".into(),
                counts: JobCounts {
                    finished: 3,
                    ..Default::default()
                },
            },
            BackendCounts {
                backend: "slurm".into(),
                counts: JobCounts {
                    queued: 1,
                    ..Default::default()
                },
            },
        ]
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn grades_are_recorded_with_when_and_whose_on_sqlite() {
    let (store, _dir) = sqlite().await;
    grades(store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn grades_are_recorded_with_when_and_whose_on_postgres() {
    if let Some(store) = postgres().await {
        grades(store).await;
    }
}
