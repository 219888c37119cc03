//! Every SQL statement of the service, once. One dialect for both backends: `$N` placeholders
//! (SQLite reads `$1` as parameter 1), `ON CONFLICT`, `RETURNING`, partial indexes. The only
//! per-backend text is the row lock of the two claim statements (`FOR UPDATE SKIP LOCKED`,
//! which SQLite neither has nor needs: it runs one writer at a time).
//!
//! Each function runs on a connection that is either a pooled one in autocommit mode or a
//! transaction's; `Store` and `Tx` in `mod.rs` choose which.

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::error::StoreError;
use super::model::*;

type Result<T> = std::result::Result<T, StoreError>;

// ---------------------------------------------------------------------------------------------
// conversions

pub(crate) fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn from_micros(v: i64, what: &'static str) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(v)
        .ok_or_else(|| StoreError::invalid(what, format!("timestamp {v} out of range")))
}

fn to_i64(v: u64, what: &'static str) -> Result<i64> {
    i64::try_from(v)
        .map_err(|_| StoreError::invalid(what, format!("{v} does not fit a signed 64-bit column")))
}

fn to_u64(v: i64, what: &'static str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::invalid(what, format!("negative value {v}")))
}

fn lease_until(now: DateTime<Utc>, lease: std::time::Duration) -> Result<DateTime<Utc>> {
    chrono::Duration::from_std(lease)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .ok_or_else(|| StoreError::invalid("lease", format!("{lease:?} is too long")))
}

// ---------------------------------------------------------------------------------------------
// reading rows

fn get<'r, T>(row: &'r AnyRow, col: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    row.try_get(col).map_err(StoreError::db("reading a row"))
}

/// PostgreSQL has BOOLEAN; SQLite stores 0/1 (sqlx's Any cannot read SQLite's BOOLEAN).
fn get_bool(row: &AnyRow, col: &'static str) -> Result<bool> {
    match row.try_get::<bool, _>(col) {
        Ok(b) => Ok(b),
        Err(_) => Ok(get::<i64>(row, col)? != 0),
    }
}

fn get_u64(row: &AnyRow, col: &'static str) -> Result<u64> {
    to_u64(get(row, col)?, col)
}

fn get_opt_u64(row: &AnyRow, col: &'static str) -> Result<Option<u64>> {
    get::<Option<i64>>(row, col)?
        .map(|v| to_u64(v, col))
        .transpose()
}

fn get_time(row: &AnyRow, col: &'static str) -> Result<DateTime<Utc>> {
    from_micros(get(row, col)?, col)
}

fn get_opt_time(row: &AnyRow, col: &'static str) -> Result<Option<DateTime<Utc>>> {
    get::<Option<i64>>(row, col)?
        .map(|v| from_micros(v, col))
        .transpose()
}

fn get_count(row: &AnyRow, col: &'static str) -> Result<u32> {
    let v: i64 = get(row, col)?;
    u32::try_from(v).map_err(|_| StoreError::invalid(col, format!("{v} out of range")))
}

macro_rules! delivery_cols {
    () => {
        "delivery_id, event, action, payload, received_at, processed_at, error"
    };
}

fn delivery(row: &AnyRow) -> Result<Delivery> {
    Ok(Delivery {
        delivery_id: get(row, "delivery_id")?,
        event: get(row, "event")?,
        action: get(row, "action")?,
        payload: get(row, "payload")?,
        received_at: get_time(row, "received_at")?,
        processed_at: get_opt_time(row, "processed_at")?,
        error: get(row, "error")?,
    })
}

macro_rules! pull_cols {
    () => {
        "repo, number, head_sha, base_ref, task_id, is_agent, author, installation_id, draft, open, \
         sticky_comment_id, grade_requested, updated_at"
    };
}

fn pull(row: &AnyRow) -> Result<Pull> {
    Ok(Pull {
        repo: get(row, "repo")?,
        number: get_u64(row, "number")?,
        head_sha: get(row, "head_sha")?,
        base_ref: get(row, "base_ref")?,
        task_id: get(row, "task_id")?,
        is_agent: get_bool(row, "is_agent")?,
        author: get(row, "author")?,
        installation_id: get_u64(row, "installation_id")?,
        draft: get_bool(row, "draft")?,
        open: get_bool(row, "open")?,
        sticky_comment_id: get_opt_u64(row, "sticky_comment_id")?,
        grade_requested: get_bool(row, "grade_requested")?,
        updated_at: get_time(row, "updated_at")?,
    })
}

macro_rules! job_cols {
    () => {
        "id, repo, number, head_sha, task_id, installation_id, state, attempts, lease_owner, lease_until, \
         check_run_id, verdict, result_json, error, created_at, updated_at, backend, dispatches, \
         external_id, remote_open, lost_runs, remote_restarts"
    };
}

fn job(row: &AnyRow) -> Result<Job> {
    let state: String = get(row, "state")?;
    Ok(Job {
        id: JobId(get(row, "id")?),
        repo: get(row, "repo")?,
        number: get_u64(row, "number")?,
        head_sha: get(row, "head_sha")?,
        task_id: get(row, "task_id")?,
        installation_id: get_u64(row, "installation_id")?,
        state: state
            .parse()
            .map_err(|e| StoreError::invalid("jobs.state", e))?,
        attempts: get_count(row, "attempts")?,
        lease_owner: get(row, "lease_owner")?,
        lease_until: get_opt_time(row, "lease_until")?,
        check_run_id: get_opt_u64(row, "check_run_id")?,
        verdict: get(row, "verdict")?,
        result_json: get(row, "result_json")?,
        error: get(row, "error")?,
        created_at: get_time(row, "created_at")?,
        updated_at: get_time(row, "updated_at")?,
        backend: get(row, "backend")?,
        dispatches: get_count(row, "dispatches")?,
        external_id: get(row, "external_id")?,
        remote_open: get_bool(row, "remote_open")?,
        lost_runs: get_count(row, "lost_runs")?,
        remote_restarts: get_count(row, "remote_restarts")?,
    })
}

macro_rules! outbox_cols {
    () => {
        "id, job_id, kind, payload, state, attempts, next_attempt_at, last_error, created_at, updated_at"
    };
}

fn outbox(row: &AnyRow) -> Result<OutboxRow> {
    let state: String = get(row, "state")?;
    let payload: String = get(row, "payload")?;
    Ok(OutboxRow {
        id: OutboxId(get(row, "id")?),
        job_id: get::<Option<i64>>(row, "job_id")?.map(JobId),
        kind: get(row, "kind")?,
        payload: serde_json::from_str(&payload)
            .map_err(|e| StoreError::invalid("outbox.payload", e.to_string()))?,
        state: state
            .parse()
            .map_err(|e| StoreError::invalid("outbox.state", e))?,
        attempts: get_count(row, "attempts")?,
        next_attempt_at: get_time(row, "next_attempt_at")?,
        last_error: get(row, "last_error")?,
        created_at: get_time(row, "created_at")?,
        updated_at: get_time(row, "updated_at")?,
    })
}

fn all<T>(rows: Vec<AnyRow>, f: fn(&AnyRow) -> Result<T>) -> Result<Vec<T>> {
    rows.iter().map(f).collect()
}

// ---------------------------------------------------------------------------------------------
// store-wide

pub(crate) async fn ping(conn: &mut AnyConnection, _: Backend) -> Result<()> {
    sqlx::query("SELECT 1")
        .execute(conn)
        .await
        .map_err(StoreError::db("ping"))?;
    Ok(())
}

pub(crate) async fn info(conn: &mut AnyConnection, backend: Backend) -> Result<StoreInfo> {
    let row =
        sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut *conn)
            .await
            .map_err(StoreError::db("reading the schema version"))?;
    let schema_version: i64 = get(&row, "v")?;
    let (journal_mode, synchronous) = match backend {
        Backend::Postgres => (None, None),
        Backend::Sqlite => {
            let row = sqlx::query("PRAGMA journal_mode")
                .fetch_one(&mut *conn)
                .await
                .map_err(StoreError::db("reading journal_mode"))?;
            let journal_mode: String = row
                .try_get(0)
                .map_err(StoreError::db("reading journal_mode"))?;
            let row = sqlx::query("PRAGMA synchronous")
                .fetch_one(&mut *conn)
                .await
                .map_err(StoreError::db("reading synchronous"))?;
            let synchronous: i64 = row
                .try_get(0)
                .map_err(StoreError::db("reading synchronous"))?;
            (Some(journal_mode), Some(synchronous))
        }
    };
    Ok(StoreInfo {
        backend,
        schema_version,
        journal_mode,
        synchronous,
    })
}

// ---------------------------------------------------------------------------------------------
// deliveries

pub(crate) async fn insert_delivery(
    conn: &mut AnyConnection,
    _: Backend,
    d: &NewDelivery,
) -> Result<Inserted> {
    let done = sqlx::query(
        "INSERT INTO deliveries (delivery_id, event, action, payload, received_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (delivery_id) DO NOTHING",
    )
    .bind(&d.delivery_id)
    .bind(&d.event)
    .bind(d.action.as_deref())
    .bind(&d.payload[..])
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("storing a delivery"))?;
    Ok(if done.rows_affected() == 1 {
        Inserted::New
    } else {
        Inserted::Duplicate
    })
}

pub(crate) async fn get_delivery(
    conn: &mut AnyConnection,
    _: Backend,
    delivery_id: &str,
) -> Result<Option<Delivery>> {
    sqlx::query(concat!(
        "SELECT ",
        delivery_cols!(),
        " FROM deliveries WHERE delivery_id = $1"
    ))
    .bind(delivery_id)
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("reading a delivery"))?
    .as_ref()
    .map(delivery)
    .transpose()
}

pub(crate) async fn unprocessed_deliveries(
    conn: &mut AnyConnection,
    _: Backend,
    limit: u32,
) -> Result<Vec<Delivery>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        delivery_cols!(),
        " FROM deliveries WHERE processed_at IS NULL ORDER BY received_at, delivery_id LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading unprocessed deliveries"))?;
    all(rows, delivery)
}

pub(crate) async fn mark_delivery_processed(
    conn: &mut AnyConnection,
    _: Backend,
    delivery_id: &str,
    error: Option<&str>,
) -> Result<bool> {
    let done =
        sqlx::query("UPDATE deliveries SET processed_at = $2, error = $3 WHERE delivery_id = $1")
            .bind(delivery_id)
            .bind(micros(Utc::now()))
            .bind(error)
            .execute(conn)
            .await
            .map_err(StoreError::db("marking a delivery processed"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn prune_deliveries(
    conn: &mut AnyConnection,
    _: Backend,
    processed_before: DateTime<Utc>,
) -> Result<u64> {
    let done =
        sqlx::query("DELETE FROM deliveries WHERE processed_at IS NOT NULL AND processed_at < $1")
            .bind(micros(processed_before))
            .execute(conn)
            .await
            .map_err(StoreError::db("pruning deliveries"))?;
    Ok(done.rows_affected())
}

// ---------------------------------------------------------------------------------------------
// pull requests and heads

pub(crate) async fn upsert_pull(
    conn: &mut AnyConnection,
    _: Backend,
    p: &PullUpsert,
) -> Result<Pull> {
    let row = sqlx::query(concat!(
        "INSERT INTO pull_requests (repo, number, head_sha, base_ref, task_id, is_agent, author, installation_id, \
         draft, open, grade_requested, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
         ON CONFLICT (repo, number) DO UPDATE SET head_sha = excluded.head_sha, base_ref = excluded.base_ref, \
         task_id = excluded.task_id, is_agent = excluded.is_agent, author = excluded.author, \
         installation_id = excluded.installation_id, draft = excluded.draft, open = excluded.open, \
         updated_at = excluded.updated_at RETURNING ",
        pull_cols!()
    ))
    .bind(&p.repo)
    .bind(to_i64(p.number, "pull number")?)
    .bind(&p.head_sha)
    .bind(&p.base_ref)
    .bind(p.task_id.as_deref())
    .bind(p.is_agent)
    .bind(&p.author)
    .bind(to_i64(p.installation_id, "installation id")?)
    .bind(p.draft)
    .bind(p.open)
    .bind(false)
    .bind(micros(Utc::now()))
    .fetch_one(conn)
    .await
    .map_err(StoreError::db("storing a pull request"))?;
    pull(&row)
}

pub(crate) async fn get_pull(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
) -> Result<Option<Pull>> {
    sqlx::query(concat!(
        "SELECT ",
        pull_cols!(),
        " FROM pull_requests WHERE repo = $1 AND number = $2"
    ))
    .bind(repo)
    .bind(to_i64(number, "pull number")?)
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("reading a pull request"))?
    .as_ref()
    .map(pull)
    .transpose()
}

pub(crate) async fn set_sticky_comment_id(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
    comment_id: Option<u64>,
) -> Result<bool> {
    let done =
        sqlx::query("UPDATE pull_requests SET sticky_comment_id = $3, updated_at = $4 WHERE repo = $1 AND number = $2")
            .bind(repo)
            .bind(to_i64(number, "pull number")?)
            .bind(comment_id.map(|id| to_i64(id, "comment id")).transpose()?)
            .bind(micros(Utc::now()))
            .execute(conn)
            .await
            .map_err(StoreError::db("storing the sticky comment id"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn set_grade_requested(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    number: u64,
    requested: bool,
) -> Result<bool> {
    let done =
        sqlx::query("UPDATE pull_requests SET grade_requested = $3, updated_at = $4 WHERE repo = $1 AND number = $2")
            .bind(repo)
            .bind(to_i64(number, "pull number")?)
            .bind(requested)
            .bind(micros(Utc::now()))
            .execute(conn)
            .await
            .map_err(StoreError::db("storing grade_requested"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn index_head(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    head_sha: &str,
    number: u64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO heads (repo, head_sha, number) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    )
    .bind(repo)
    .bind(head_sha)
    .bind(to_i64(number, "pull number")?)
    .execute(conn)
    .await
    .map_err(StoreError::db("indexing a head"))?;
    Ok(())
}

pub(crate) async fn pulls_for_head(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
    head_sha: &str,
) -> Result<Vec<u64>> {
    let rows =
        sqlx::query("SELECT number FROM heads WHERE repo = $1 AND head_sha = $2 ORDER BY number")
            .bind(repo)
            .bind(head_sha)
            .fetch_all(conn)
            .await
            .map_err(StoreError::db("reading the pulls of a head"))?;
    rows.iter().map(|row| get_u64(row, "number")).collect()
}

mod grades;
mod jobs;
mod outbox;
mod refused;
mod remote;
pub(crate) use grades::*;
pub(crate) use jobs::*;
pub(crate) use outbox::*;
pub(crate) use refused::*;
pub(crate) use remote::*;
