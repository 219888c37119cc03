//! Queries of refused deliveries (never redelivered) and of the App's installations (what the
//! resync on start reads).

use chrono::Utc;
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use super::{all, get, get_bool, get_time, get_u64, micros, to_i64};
use crate::service::store::error::StoreError;
use crate::service::store::model::*;

type Result<T> = std::result::Result<T, StoreError>;

macro_rules! refused_cols {
    () => {
        "delivery_id, event, status, reason, source, refused_at"
    };
}

fn refused(row: &AnyRow) -> Result<RefusedDelivery> {
    let source: String = get(row, "source")?;
    Ok(RefusedDelivery {
        delivery_id: get(row, "delivery_id")?,
        event: get(row, "event")?,
        status: u16::try_from(get::<i64>(row, "status")?).unwrap_or(0),
        reason: get(row, "reason")?,
        source: RefusalSource::parse(&source)
            .ok_or_else(|| StoreError::invalid("source", format!("{source:?} is no source")))?,
        refused_at: get_time(row, "refused_at")?,
    })
}

pub(crate) async fn record_refused_delivery(
    conn: &mut AnyConnection,
    _: Backend,
    r: &RefusedDelivery,
) -> Result<bool> {
    let done = sqlx::query(
        "INSERT INTO refused_deliveries (delivery_id, event, status, reason, source, refused_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (delivery_id) DO NOTHING",
    )
    .bind(&r.delivery_id)
    .bind(r.event.as_deref())
    .bind(i64::from(r.status))
    .bind(&r.reason)
    .bind(r.source.as_str())
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("recording a refused delivery"))?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn get_refused_delivery(
    conn: &mut AnyConnection,
    _: Backend,
    delivery_id: &str,
) -> Result<Option<RefusedDelivery>> {
    sqlx::query(concat!(
        "SELECT ",
        refused_cols!(),
        " FROM refused_deliveries WHERE delivery_id = $1"
    ))
    .bind(delivery_id)
    .fetch_optional(conn)
    .await
    .map_err(StoreError::db("reading a refused delivery"))?
    .as_ref()
    .map(refused)
    .transpose()
}

pub(crate) async fn refused_deliveries(
    conn: &mut AnyConnection,
    _: Backend,
    limit: u32,
) -> Result<Vec<RefusedDelivery>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        refused_cols!(),
        " FROM refused_deliveries ORDER BY refused_at DESC, delivery_id LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading refused deliveries"))?;
    all(rows, refused)
}

pub(crate) async fn count_refused_deliveries(conn: &mut AnyConnection, _: Backend) -> Result<u64> {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM refused_deliveries")
        .fetch_one(conn)
        .await
        .map_err(StoreError::db("counting refused deliveries"))?;
    get_u64(&row, "n")
}

pub(crate) async fn set_installation(
    conn: &mut AnyConnection,
    _: Backend,
    installation_id: u64,
    active: bool,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO installations (installation_id, active, updated_at) VALUES ($1, $2, $3) \
         ON CONFLICT (installation_id) DO UPDATE SET active = excluded.active, updated_at = excluded.updated_at",
    )
    .bind(to_i64(installation_id, "installation id")?)
    .bind(active)
    .bind(micros(Utc::now()))
    .execute(conn)
    .await
    .map_err(StoreError::db("recording an installation"))?;
    Ok(())
}

pub(crate) async fn installation_active(
    conn: &mut AnyConnection,
    _: Backend,
    installation_id: u64,
) -> Result<Option<bool>> {
    sqlx::query("SELECT active FROM installations WHERE installation_id = $1")
        .bind(to_i64(installation_id, "installation id")?)
        .fetch_optional(conn)
        .await
        .map_err(StoreError::db("reading an installation"))?
        .map(|row| get_bool(&row, "active"))
        .transpose()
}

pub(crate) async fn known_installations(conn: &mut AnyConnection, _: Backend) -> Result<Vec<u64>> {
    let rows = sqlx::query(
        "SELECT installation_id FROM installations WHERE active \
         UNION SELECT DISTINCT installation_id FROM pull_requests WHERE installation_id <> 0 \
         AND installation_id NOT IN (SELECT installation_id FROM installations WHERE NOT active) \
         ORDER BY installation_id",
    )
    .fetch_all(conn)
    .await
    .map_err(StoreError::db("reading the known installations"))?;
    rows.iter()
        .map(|row| get_u64(row, "installation_id"))
        .collect()
}

pub(crate) async fn open_pull_numbers(
    conn: &mut AnyConnection,
    _: Backend,
    repo: &str,
) -> Result<Vec<u64>> {
    let rows =
        sqlx::query("SELECT number FROM pull_requests WHERE repo = $1 AND open ORDER BY number")
            .bind(repo)
            .fetch_all(conn)
            .await
            .map_err(StoreError::db("reading the open pull requests"))?;
    rows.iter().map(|row| get_u64(row, "number")).collect()
}
