//! A read-only look at a store for `infradev doctor`: can it be reached, and how far its
//! schema is migrated. Nothing is created or migrated here (`Store::open` does that).

use std::time::Duration;

use sqlx::any::AnyPoolOptions;

use super::{Backend, StoreError, backend_of, migrations};

/// What `doctor` reports about a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCheck {
    pub backend: Backend,
    /// The newest migration applied, `None` when none is (a new database: `serve` applies
    /// them all on start).
    pub applied: Option<i64>,
    /// The newest migration this binary brings.
    pub latest: i64,
}

/// Connects to `url` (within 5 seconds) and reads its migration state. A SQLite file that
/// does not exist yet is not an error: `serve` creates it.
pub async fn check(url: &str) -> Result<StoreCheck, StoreError> {
    sqlx::any::install_default_drivers();
    let backend = backend_of(url)?;
    let latest = migrations::latest_version(backend);
    if backend == Backend::Sqlite {
        let path = url
            .trim_start_matches("sqlite://")
            .trim_start_matches("sqlite:");
        let path = path.split('?').next().unwrap_or(path);
        if !path.contains(":memory:") && !std::path::Path::new(path).exists() {
            return Ok(StoreCheck {
                backend,
                applied: None,
                latest,
            });
        }
    }
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(StoreError::db("connecting to the store"))?;
    let table = match backend {
        Backend::Sqlite => {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
        }
        Backend::Postgres => {
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '_sqlx_migrations'"
        }
    };
    let exists: i64 = sqlx::query_scalar(table)
        .fetch_one(&pool)
        .await
        .map_err(StoreError::db("reading the migration table"))?;
    let applied = if exists == 0 {
        None
    } else {
        sqlx::query_scalar::<_, Option<i64>>(
            "SELECT MAX(version) FROM _sqlx_migrations WHERE success = TRUE",
        )
        .fetch_one(&pool)
        .await
        .map_err(StoreError::db("reading the applied migrations"))?
    };
    pool.close().await;
    Ok(StoreCheck {
        backend,
        applied,
        latest,
    })
}
