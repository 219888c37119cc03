//! Queries of the outbox: the GitHub writes waiting to be delivered, claimed, retried or dead.

use super::*;

pub(crate) async fn push_outbox(
    conn: &mut AnyConnection,
    _: Backend,
    row: &NewOutbox,
) -> Result<OutboxId> {
    let now = micros(Utc::now());
    let inserted = sqlx::query(
        "INSERT INTO outbox (job_id, kind, payload, state, attempts, next_attempt_at, created_at, updated_at) \
         VALUES ($1, $2, $3, 'pending', 0, $4, $4, $4) RETURNING id",
    )
    .bind(row.job_id.map(|id| id.0))
    .bind(&row.kind)
    .bind(row.payload.to_string())
    .bind(now)
    .fetch_one(conn)
    .await
    .map_err(StoreError::db("queueing an outbox row"))?;
    Ok(OutboxId(get(&inserted, "id")?))
}

/// A pending row is due when its time has come and no earlier row of the same job is still
/// pending: the rows of one job go out in order (a check run is created before it completes).
macro_rules! due_where {
    () => {
        "state = 'pending' AND next_attempt_at <= $1 AND NOT EXISTS (SELECT 1 FROM outbox earlier \
         WHERE earlier.job_id = outbox.job_id AND earlier.state = 'pending' AND earlier.id < outbox.id)"
    };
}

pub(crate) async fn due_outbox(
    conn: &mut AnyConnection,
    _: Backend,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<OutboxRow>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        outbox_cols!(),
        " FROM outbox WHERE ",
        due_where!(),
        " ORDER BY id LIMIT $2"
    ))
    .bind(micros(now))
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading the due outbox"))?;
    all(rows, outbox)
}

macro_rules! claim_outbox_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE outbox SET next_attempt_at = $2, updated_at = $1 WHERE id IN (SELECT id FROM outbox WHERE ",
            due_where!(),
            " ORDER BY id LIMIT $3",
            $lock,
            ") RETURNING ",
            outbox_cols!()
        )
    };
}

pub(crate) async fn claim_outbox(
    conn: &mut AnyConnection,
    backend: Backend,
    now: DateTime<Utc>,
    lease: std::time::Duration,
    limit: u32,
) -> Result<Vec<OutboxRow>> {
    let sql = match backend {
        Backend::Sqlite => claim_outbox_sql!(""),
        Backend::Postgres => claim_outbox_sql!(" FOR UPDATE SKIP LOCKED"),
    };
    let rows = sqlx::query(sql)
        .bind(micros(now))
        .bind(micros(lease_until(now, lease)?))
        .bind(i64::from(limit))
        .fetch_all(conn)
        .await
        .map_err(StoreError::db("claiming outbox rows"))?;
    let mut rows = all(rows, outbox)?;
    rows.sort_by_key(|r| r.id);
    Ok(rows)
}

pub(crate) async fn get_outbox(
    conn: &mut AnyConnection,
    _: Backend,
    id: OutboxId,
) -> Result<Option<OutboxRow>> {
    sqlx::query(concat!(
        "SELECT ",
        outbox_cols!(),
        " FROM outbox WHERE id = $1"
    ))
    .bind(id.0)
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("reading an outbox row"))?
    .as_ref()
    .map(outbox)
    .transpose()
}

pub(crate) async fn outbox_for_job(
    conn: &mut AnyConnection,
    _: Backend,
    job_id: JobId,
) -> Result<Vec<OutboxRow>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        outbox_cols!(),
        " FROM outbox WHERE job_id = $1 ORDER BY id"
    ))
    .bind(job_id.0)
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading a job's outbox rows"))?;
    all(rows, outbox)
}

pub(crate) async fn complete_outbox(
    conn: &mut AnyConnection,
    _: Backend,
    id: OutboxId,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE outbox SET state = 'done', attempts = attempts + 1, last_error = NULL, updated_at = $2 \
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(id.0)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("completing an outbox row"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn retry_outbox(
    conn: &mut AnyConnection,
    _: Backend,
    id: OutboxId,
    next_attempt_at: DateTime<Utc>,
    error: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = $2, last_error = $3, updated_at = $4 \
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(id.0)
    .bind(micros(next_attempt_at))
    .bind(error)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("rescheduling an outbox row"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn dead_outbox(
    conn: &mut AnyConnection,
    _: Backend,
    id: OutboxId,
    error: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE outbox SET state = 'dead', attempts = attempts + 1, last_error = $2, updated_at = $3 \
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(id.0)
    .bind(error)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("giving up an outbox row"))?;
    Ok(done.rows_affected() == 1)
}

/// Every pending row, due or not, by id.
pub(crate) async fn pending_outbox(conn: &mut AnyConnection, _: Backend) -> Result<Vec<OutboxRow>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        outbox_cols!(),
        " FROM outbox WHERE state = 'pending' ORDER BY id"
    ))
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading the pending outbox"))?;
    all(rows, outbox)
}

pub(crate) async fn pending_outbox_count(conn: &mut AnyConnection, _: Backend) -> Result<u64> {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM outbox WHERE state = 'pending'")
        .fetch_one(conn)
        .await
        .map_err(StoreError::db("counting the outbox"))?;
    get_u64(&row, "n")
}
