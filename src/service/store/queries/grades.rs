//! Queries of finished grades, as the grade pages, the dashboard and `infradev stats --store`
//! read them (migration 0004: `finished_at`, `author`), and of the queue per backend.

use chrono::{DateTime, Utc};
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use super::{all, get, get_opt_time, get_u64, job, micros, to_i64};
use crate::service::store::error::StoreError;
use crate::service::store::model::*;

type Result<T> = std::result::Result<T, StoreError>;

fn graded(row: &AnyRow) -> Result<GradedJob> {
    Ok(GradedJob {
        job: job(row)?,
        finished_at: get_opt_time(row, "finished_at")?,
        author: get(row, "author")?,
    })
}

pub(crate) async fn graded_job(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
) -> Result<Option<GradedJob>> {
    sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        ", finished_at, author FROM jobs WHERE id = $1"
    ))
    .bind(id.0)
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("reading a job"))?
    .as_ref()
    .map(graded)
    .transpose()
}

pub(crate) async fn graded_jobs_for_pull(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
) -> Result<Vec<GradedJob>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        ", finished_at, author FROM jobs WHERE repo = $1 AND number = $2 ORDER BY id"
    ))
    .bind(repo)
    .bind(to_i64(number, "pull number")?)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading a pull request's grades"))?;
    all(rows, graded)
}

pub(crate) async fn finished_jobs(
    conn: &mut AnyConnection,
    _: Backend,
    since: Option<DateTime<Utc>>,
    limit: u32,
) -> Result<Vec<GradedJob>> {
    // The newest `limit`, handed back oldest first.
    let rows = sqlx::query(concat!(
        "SELECT * FROM (SELECT ",
        job_cols!(),
        ", finished_at, author FROM jobs WHERE state = 'finished' AND finished_at >= $1 \
         ORDER BY finished_at DESC, id DESC LIMIT $2) newest ORDER BY finished_at, id"
    ))
    .bind(since.map_or(i64::MIN, micros))
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading finished jobs"))?;
    all(rows, graded)
}

pub(crate) async fn count_jobs_by_backend(
    conn: &mut AnyConnection,
    _: Backend,
) -> Result<Vec<BackendCounts>> {
    let rows = sqlx::query(
        "SELECT backend, state, COUNT(*) AS n FROM jobs GROUP BY backend, state ORDER BY backend",
    )
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("counting jobs per backend"))?;
    let mut out: Vec<BackendCounts> = Vec::new();
    for row in &rows {
        let backend: String = get(row, "backend")?;
        let state: String = get(row, "state")?;
        let state: JobState = state
            .parse()
            .map_err(|e| StoreError::invalid("jobs.state", e))?;
        if out.last().is_none_or(|b| b.backend != backend) {
            out.push(BackendCounts {
                backend: backend.clone(),
                counts: JobCounts::default(),
            });
        }
        if let Some(last) = out.last_mut() {
            last.counts.set(state, get_u64(row, "n")?);
        }
    }
    Ok(out)
}
