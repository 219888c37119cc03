//! `StoreError`: what can go wrong talking to the database, and whether retrying may help.

use std::error::Error as StdError;

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no backend we support.
    #[error("unsupported store URL {0:?}: expected sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),

    /// The database or the connection to it failed.
    #[error("{context}: {source}")]
    Database {
        context: &'static str,
        /// Retrying the same operation later may succeed (busy, lock conflict, lost connection).
        transient: bool,
        #[source]
        source: BoxError,
    },

    /// Applying the embedded migrations failed (including an applied migration that changed).
    #[error("migrating the {backend} store: {source}")]
    Migrate {
        backend: &'static str,
        #[source]
        source: BoxError,
    },

    /// A value does not fit the database (an id beyond i64) or the database holds a value we
    /// cannot read back (an unknown state, a negative number).
    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },
}

impl StoreError {
    /// Whether retrying later may succeed: the database was busy or unreachable, a lock wait
    /// or serialization conflict aborted the transaction, the pool had no free connection.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database { transient, .. } => *transient,
            StoreError::UnsupportedUrl(_)
            | StoreError::Migrate { .. }
            | StoreError::Invalid { .. } => false,
        }
    }

    pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> StoreError {
        StoreError::Invalid {
            what,
            detail: detail.into(),
        }
    }

    /// Wraps an sqlx error, classifying it. The sqlx type stays private to the store.
    pub(crate) fn db(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |e| StoreError::Database {
            context,
            transient: sqlx_is_transient(&e),
            source: Box::new(e),
        }
    }
}

fn sqlx_is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| code_is_transient(&code)),
        _ => false,
    }
}

/// PostgreSQL SQLSTATEs (always five characters) and SQLite result codes (decimal, at most four
/// digits, extended codes included) worth retrying.
fn code_is_transient(code: &str) -> bool {
    if code.len() == 5 {
        return code.starts_with("08") // connection_exception
            || matches!(
                code,
                "40001" // serialization_failure
                | "40P01" // deadlock_detected
                | "55P03" // lock_not_available
                | "53300" // too_many_connections
                | "57P01" // admin_shutdown
                | "57P02" // crash_shutdown
                | "57P03" // cannot_connect_now
            );
    }
    // SQLITE_BUSY and SQLITE_LOCKED, with their extended codes.
    code.parse::<i64>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
}

#[cfg(test)]
mod tests {
    use super::code_is_transient;

    #[test]
    fn classifies_codes() {
        for code in [
            "40001", "40P01", "55P03", "57P01", "08006", "08001", "5", "517", "6", "262",
        ] {
            assert!(code_is_transient(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02", "19", "2067", "1", "787"] {
            assert!(!code_is_transient(code), "{code}");
        }
    }
}
