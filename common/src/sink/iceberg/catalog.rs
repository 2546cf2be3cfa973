//! The Iceberg SQL catalog in a SQLite file: the one module that names
//! SQLite. Its tables are those pyiceberg's `SqlCatalog` and Java's
//! `JdbcCatalog` keep, so each reads what the other writes:
//!
//! ```text
//! iceberg_tables(catalog_name, table_namespace, table_name, metadata_location,
//!                previous_metadata_location, iceberg_type)   one row per table
//! iceberg_namespace_properties(catalog_name, namespace, property_key, property_value)
//! ```
//!
//! A table's commit is a compare-and-swap of its `metadata_location`: the
//! update names the location it replaces, and changes no row when another
//! writer replaced it first. Every call runs off the async workers, within
//! [`DEADLINE`]; a busy database is waited for up to [`BUSY`] and is then
//! an error that may be retried.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;

use crate::error::Error;

/// How long a call waits for the database's lock.
const BUSY: Duration = Duration::from_secs(5);
/// How long a call may take in all.
const DEADLINE: Duration = Duration::from_secs(15);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);";

/// One table of a SQL catalog.
#[derive(Debug, Clone)]
pub struct SqlTable {
    pub file: PathBuf,
    pub catalog: String,
    pub namespace: String,
    pub table: String,
}

impl SqlTable {
    /// How errors name the table.
    pub fn describe(&self) -> String {
        format!(
            "{:?} in {} (table {}.{})",
            self.catalog,
            self.file.display(),
            self.namespace,
            self.table
        )
    }

    /// The table's current metadata file, if the catalog has the table.
    pub async fn current(&self) -> Result<Option<String>> {
        self.call(|t, db| {
            db.query_row(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ?1 \
                 AND table_namespace = ?2 AND table_name = ?3 \
                 AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
                params![t.catalog, t.namespace, t.table],
                |row| row.get::<_, Option<String>>(0),
            )
            .optional()
            .map(Option::flatten)
        })
        .await
    }

    /// Registers the table with its first metadata file `location`, and
    /// its namespace; `false` when another writer registered the table
    /// first.
    pub async fn create(&self, location: String) -> Result<bool> {
        self.call(move |t, db| {
            let tx = db.transaction()?;
            tx.execute(
                "INSERT OR IGNORE INTO iceberg_namespace_properties \
                 VALUES (?1, ?2, 'exists', 'true')",
                params![t.catalog, t.namespace],
            )?;
            let made = tx.execute(
                "INSERT OR IGNORE INTO iceberg_tables VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')",
                params![t.catalog, t.namespace, t.table, location],
            )?;
            tx.commit()?;
            Ok(made == 1)
        })
        .await
    }

    /// Points the table at metadata file `new` if it still points at
    /// `old`; `false` when another writer moved it first.
    pub async fn swap(&self, old: String, new: String) -> Result<bool> {
        self.call(move |t, db| {
            let changed = db.execute(
                "UPDATE iceberg_tables SET metadata_location = ?1, \
                 previous_metadata_location = ?2 WHERE catalog_name = ?3 \
                 AND table_namespace = ?4 AND table_name = ?5 AND metadata_location = ?2",
                params![new, old, t.catalog, t.namespace, t.table],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    /// Runs `f` on a connection to the catalog, off the async workers.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SqlTable, &mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let table = self.clone();
        let run = tokio::task::spawn_blocking(move || {
            regular_or_absent(&table.file).map_err(|why| (why, false))?;
            let mut db = Connection::open(&table.file).map_err(sql)?;
            db.busy_timeout(BUSY).map_err(sql)?;
            db.execute_batch(SCHEMA).map_err(sql)?;
            f(&table, &mut db).map_err(sql)
        });
        let failed = |reason: String, retryable: bool| Error::Catalog {
            catalog: self.describe(),
            reason,
            retryable,
        };
        match tokio::time::timeout(DEADLINE, run).await {
            Err(_) => Err(failed(format!("no answer within {DEADLINE:?}"), true)),
            Ok(Err(e)) => Err(failed(format!("the call panicked: {e}"), false)),
            Ok(Ok(Err((reason, retryable)))) => Err(failed(reason, retryable)),
            Ok(Ok(Ok(v))) => Ok(v),
        }
    }
}

/// A SQLite error as a reason, and whether it may pass (the database was
/// busy or locked).
fn sql(e: rusqlite::Error) -> (String, bool) {
    let busy = matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    (e.to_string(), busy)
}

/// The catalog's file is a regular file, or not there yet (SQLite creates
/// it): a directory, device or FIFO the spec names is never opened.
fn regular_or_absent(file: &std::path::Path) -> std::result::Result<(), String> {
    match std::fs::metadata(file) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err("it is not a regular file".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(dir: &tempfile::TempDir, name: &str) -> SqlTable {
        SqlTable {
            file: dir.path().join("catalog.db"),
            catalog: "default".into(),
            namespace: "db".into(),
            table: name.into(),
        }
    }

    #[tokio::test]
    async fn a_table_is_created_once_and_moved_only_from_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let t = table(&dir, "events");
        assert_eq!(t.current().await.unwrap(), None);
        assert!(t.create("m0".into()).await.unwrap());
        assert!(!t.create("other".into()).await.unwrap(), "created once");
        assert_eq!(t.current().await.unwrap().as_deref(), Some("m0"));
        assert!(t.swap("m0".into(), "m1".into()).await.unwrap());
        assert!(
            !t.swap("m0".into(), "m2".into()).await.unwrap(),
            "m0 is gone"
        );
        assert_eq!(t.current().await.unwrap().as_deref(), Some("m1"));
        assert_eq!(table(&dir, "other").current().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_file_that_is_no_database_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("catalog.db"),
            b"not sqlite at all, not at all",
        )
        .unwrap();
        let e = table(&dir, "t").current().await.unwrap_err().to_string();
        assert!(
            e.contains("catalog.db") && e.contains("Iceberg catalog"),
            "{e}"
        );
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join("catalog.db")).unwrap();
        let e = table(&other, "t").current().await.unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
