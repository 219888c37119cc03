//! The schema migrations, embedded in the binary and applied at [`Store::open`](super::Store::open).
//!
//! The SQL lives in `migrations/sqlite/NNNN_name.sql` and `migrations/postgres/NNNN_name.sql`
//! (the column types differ; the tables, columns and their meaning do not). Each file is
//! embedded with `include_str!` and handed to sqlx's own `Migrator` through a
//! [`MigrationSource`] of ours, because `sqlx::migrate!` needs sqlx's `macros` feature. So the
//! binary needs no files at run time, and sqlx keeps the bookkeeping: the `_sqlx_migrations`
//! table, one transaction per migration, a checksum check that refuses a database whose applied
//! migration was since edited, and (PostgreSQL) an advisory lock so two hosts starting at once
//! do not both migrate.
//!
//! To add a migration: write `NNNN_name.sql` for both backends and list both below. A unit test
//! fails when a file in either directory is not listed, or when the two lists differ.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::model::Backend;

/// (file name, SQL), in version order.
type Files = &'static [(&'static str, &'static str)];

const SQLITE: Files = &[
    (
        "0001_init.sql",
        include_str!("../../../migrations/sqlite/0001_init.sql"),
    ),
    (
        "0002_remote_backends.sql",
        include_str!("../../../migrations/sqlite/0002_remote_backends.sql"),
    ),
    (
        "0003_refused_deliveries_installations.sql",
        include_str!("../../../migrations/sqlite/0003_refused_deliveries_installations.sql"),
    ),
    (
        "0004_grades.sql",
        include_str!("../../../migrations/sqlite/0004_grades.sql"),
    ),
];

const POSTGRES: Files = &[
    (
        "0001_init.sql",
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        "0002_remote_backends.sql",
        include_str!("../../../migrations/postgres/0002_remote_backends.sql"),
    ),
    (
        "0003_refused_deliveries_installations.sql",
        include_str!("../../../migrations/postgres/0003_refused_deliveries_installations.sql"),
    ),
    (
        "0004_grades.sql",
        include_str!("../../../migrations/postgres/0004_grades.sql"),
    ),
];

fn files(backend: Backend) -> Files {
    match backend {
        Backend::Sqlite => SQLITE,
        Backend::Postgres => POSTGRES,
    }
}

/// The highest version embedded for `backend`.
pub(crate) fn latest_version(backend: Backend) -> i64 {
    files(backend)
        .iter()
        .filter_map(|(name, _)| parse_name(name).map(|(v, _)| v))
        .max()
        .unwrap_or(0)
}

/// `0001_init.sql` → (1, "init"), the way sqlx reads a migrations directory.
fn parse_name(name: &str) -> Option<(i64, String)> {
    let stem = name.strip_suffix(".sql")?;
    let (version, description) = stem.split_once('_')?;
    Some((version.parse().ok()?, description.replace('_', " ")))
}

#[derive(Debug)]
struct Embedded(Files);

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        Box::pin(async move {
            let mut migrations = Vec::with_capacity(self.0.len());
            for (name, sql) in self.0 {
                let (version, description) = parse_name(name)
                    .ok_or_else(|| format!("migration file name {name:?} is not NNNN_name.sql"))?;
                migrations.push(Migration::new(
                    version,
                    Cow::Owned(description),
                    MigrationType::Simple,
                    Cow::Borrowed(*sql),
                    false,
                ));
            }
            migrations.sort_by_key(|m| m.version);
            Ok(migrations)
        })
    }
}

/// sqlx's migrator over the embedded files of `backend`.
pub(crate) async fn migrator(backend: Backend) -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded(files(backend))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn on_disk(dir: &str) -> Vec<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(dir);
        let mut names: Vec<String> = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_file_is_embedded_and_both_backends_agree() {
        for (dir, backend) in [("sqlite", Backend::Sqlite), ("postgres", Backend::Postgres)] {
            let embedded: Vec<String> = files(backend)
                .iter()
                .map(|(name, _)| name.to_string())
                .collect();
            assert_eq!(
                embedded,
                on_disk(dir),
                "migrations/{dir} and src/store/migrations.rs disagree"
            );
            for name in &embedded {
                assert!(parse_name(name).is_some(), "{name} is not NNNN_name.sql");
            }
        }
        let names = |b| files(b).iter().map(|(n, _)| *n).collect::<Vec<_>>();
        assert_eq!(names(Backend::Sqlite), names(Backend::Postgres));
        assert_eq!(
            latest_version(Backend::Sqlite),
            latest_version(Backend::Postgres)
        );
    }

    #[test]
    fn parses_names() {
        assert_eq!(parse_name("0001_init.sql"), Some((1, "init".into())));
        assert_eq!(
            parse_name("0012_add_outbox_index.sql"),
            Some((12, "add outbox index".into()))
        );
        assert_eq!(parse_name("init.sql"), None);
        assert_eq!(parse_name("0001_init.txt"), None);
    }
}
