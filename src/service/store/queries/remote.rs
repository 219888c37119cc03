//! Queries of jobs graded by a remote backend (Slurm, GitHub Actions): dispatch claims, the
//! engine's ids, per-dispatch result tokens (hashed) and every result posted.
//!
//! A remote job is `running` from its dispatch until its result is accepted; its lease owner is
//! `remote:<backend>` (any server may finish it) and its lease runs until the grade's deadline.
//! `remote_open` says the current dispatch may still be alive in the engine, so that a
//! cancelled job's run is cancelled there too.

use chrono::{DateTime, Utc};
use sqlx::AnyConnection;

use super::{all, get, get_count, get_time, job, micros};
use crate::service::store::error::StoreError;
use crate::service::store::model::*;

type Result<T> = std::result::Result<T, StoreError>;

pub(crate) async fn set_job_backend(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    backend: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET backend = $2 WHERE id = $1 AND state = 'queued' AND dispatches = 0",
    )
    .bind(id.0)
    .bind(backend)
    .execute(conn)
    .await
    .map_err(StoreError::db("routing a job to a backend"))?;
    Ok(done.rows_affected() == 1)
}

macro_rules! claim_dispatch_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE jobs SET state = 'running', lease_owner = $2, lease_until = $3, attempts = attempts + 1, \
             dispatches = dispatches + 1, external_id = NULL, remote_open = TRUE, remote_restarts = 0, \
             updated_at = $4 WHERE id = (SELECT id FROM jobs WHERE backend = $1 AND state = 'queued' \
             AND (lease_until IS NULL OR lease_until <= $4) ORDER BY id LIMIT 1",
            $lock,
            ") RETURNING ",
            job_cols!()
        )
    };
}

pub(crate) async fn claim_dispatch(
    conn: &mut AnyConnection,
    backend: Backend,
    remote: &str,
    until: DateTime<Utc>,
) -> Result<Option<Job>> {
    let sql = match backend {
        Backend::Sqlite => claim_dispatch_sql!(""),
        Backend::Postgres => claim_dispatch_sql!(" FOR UPDATE SKIP LOCKED"),
    };
    sqlx::query(sql)
        .bind(remote)
        .bind(remote_owner(remote))
        .bind(micros(until))
        .bind(micros(Utc::now()))
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db("claiming a job to dispatch"))?
        .as_ref()
        .map(job)
        .transpose()
}

pub(crate) async fn insert_job_token(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
    token_hash: &str,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO job_tokens (token_hash, job_id, dispatch, expires_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(token_hash)
    .bind(id.0)
    .bind(i64::from(dispatch))
    .bind(micros(expires_at))
    .execute(conn)
    .await
    .map_err(StoreError::db("storing a result token"))?;
    Ok(())
}

pub(crate) async fn set_external_id(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
    external_id: &str,
    deadline: DateTime<Utc>,
) -> Result<Option<Job>> {
    sqlx::query(concat!(
        "UPDATE jobs SET external_id = $3, \
         lease_until = CASE WHEN state = 'running' THEN $4 ELSE lease_until END, updated_at = $5 \
         WHERE id = $1 AND dispatches = $2 RETURNING ",
        job_cols!()
    ))
    .bind(id.0)
    .bind(i64::from(dispatch))
    .bind(external_id)
    .bind(micros(deadline))
    .bind(micros(Utc::now()))
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("recording a submission"))?
    .as_ref()
    .map(job)
    .transpose()
}

pub(crate) async fn open_remote_jobs(
    conn: &mut AnyConnection,
    _: Backend,
    backend: &str,
) -> Result<Vec<Job>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        " FROM jobs WHERE backend = $1 AND remote_open = TRUE ORDER BY id"
    ))
    .bind(backend)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("listing remote jobs"))?;
    all(rows, job)
}

pub(crate) async fn close_remote(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET remote_open = FALSE WHERE id = $1 AND dispatches = $2 AND remote_open = TRUE",
    )
    .bind(id.0)
    .bind(i64::from(dispatch))
    .execute(conn)
    .await
    .map_err(StoreError::db("closing a remote dispatch"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn requeue_remote(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
    lost: bool,
    error: &str,
    not_before: Option<DateTime<Utc>>,
) -> Result<Option<Job>> {
    sqlx::query(concat!(
        "UPDATE jobs SET state = 'queued', remote_open = FALSE, external_id = NULL, lease_owner = NULL, \
         lease_until = $6, lost_runs = lost_runs + $3, error = $4, updated_at = $5 \
         WHERE id = $1 AND dispatches = $2 AND state = 'running' RETURNING ",
        job_cols!()
    ))
    .bind(id.0)
    .bind(i64::from(dispatch))
    .bind(i64::from(lost))
    .bind(error)
    .bind(micros(Utc::now()))
    .bind(not_before.map(micros))
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("requeueing a remote job"))?
    .as_ref()
    .map(job)
    .transpose()
}

pub(crate) async fn count_lost_run(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET lost_runs = lost_runs + 1, updated_at = $3 WHERE id = $1 AND dispatches = $2",
    )
    .bind(id.0)
    .bind(i64::from(dispatch))
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("counting a lost run"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn note_remote_restarts(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
    restarts: u32,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE jobs SET remote_restarts = $3, updated_at = $4 \
         WHERE id = $1 AND dispatches = $2 AND remote_restarts < $3",
    )
    .bind(id.0)
    .bind(i64::from(dispatch))
    .bind(i64::from(restarts))
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("recording a requeue"))?;
    Ok(done.rows_affected() == 1)
}

fn token(row: &sqlx::any::AnyRow) -> Result<JobToken> {
    Ok(JobToken {
        job_id: JobId(get(row, "job_id")?),
        dispatch: get_count(row, "dispatch")?,
        expires_at: get_time(row, "expires_at")?,
        used_at: super::get_opt_time(row, "used_at")?,
    })
}

pub(crate) async fn find_job_token(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    token_hash: &str,
) -> Result<Option<JobToken>> {
    sqlx::query(
        "SELECT job_id, dispatch, expires_at, used_at FROM job_tokens WHERE token_hash = $1 AND job_id = $2",
    )
    .bind(token_hash)
    .bind(id.0)
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("looking up a result token"))?
    .as_ref()
    .map(token)
    .transpose()
}

pub(crate) async fn use_job_token(
    conn: &mut AnyConnection,
    _: Backend,
    token_hash: &str,
) -> Result<bool> {
    let done =
        sqlx::query("UPDATE job_tokens SET used_at = $2 WHERE token_hash = $1 AND used_at IS NULL")
            .bind(token_hash)
            .bind(micros(Utc::now()))
            .execute(conn)
            .await
            .map_err(StoreError::db("using a result token"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn insert_job_result(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
    dispatch: u32,
    disposition: Disposition,
    reason: Option<&str>,
    body: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO job_results (job_id, dispatch, disposition, reason, body, received_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id.0)
    .bind(i64::from(dispatch))
    .bind(disposition.as_str())
    .bind(reason)
    .bind(body)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("recording a result"))?;
    Ok(())
}

pub(crate) async fn job_results(
    conn: &mut AnyConnection,
    _: Backend,
    id: JobId,
) -> Result<Vec<JobResult>> {
    let rows = sqlx::query(
        "SELECT id, job_id, dispatch, disposition, reason, body, received_at FROM job_results \
         WHERE job_id = $1 ORDER BY id",
    )
    .bind(id.0)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("listing results"))?;
    all(rows, |row| {
        let disposition: String = get(row, "disposition")?;
        Ok(JobResult {
            id: get(row, "id")?,
            job_id: JobId(get(row, "job_id")?),
            dispatch: get_count(row, "dispatch")?,
            disposition: disposition
                .parse()
                .map_err(|e| StoreError::invalid("job_results.disposition", e))?,
            reason: get(row, "reason")?,
            body: get(row, "body")?,
            received_at: get_time(row, "received_at")?,
        })
    })
}

/// The jobs of `backend` whose engine id is `external_id` (a workflow run id), newest first.
pub(crate) async fn jobs_by_external_id(
    conn: &mut AnyConnection,
    _: Backend,
    backend: &str,
    external_id: &str,
) -> Result<Vec<Job>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        job_cols!(),
        " FROM jobs WHERE backend = $1 AND external_id = $2 ORDER BY id DESC"
    ))
    .bind(backend)
    .bind(external_id)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("looking up a job by its engine id"))?;
    all(rows, job)
}
