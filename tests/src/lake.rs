//! The outside readers of the lakehouse sinks' tables: `deltalake`
//! (delta-rs) and DuckDB's delta extension, run from the pinned venv
//! `target/lake/venv` (`scripts/deps.sh test`) by `tests/lake/read_delta.py`,
//! and the rows they read made comparable with the SQL oracle's.

use std::path::{Path, PathBuf};
use std::process::Command;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, TimeUnit};

use sluice_common::sink::delta::{LOG_DIR, txn_version};
use sluice_common::sink::delta_compact::changes_of;

use crate::oracle::normalized;

/// What the readers read of a Delta table.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct DeltaRead {
    /// The table's version (its newest commit).
    pub version: i64,
    /// The data files of that version.
    pub files: usize,
    /// The txn version of the app id asked about.
    pub txn: Option<i64>,
    pub partition_columns: Vec<String>,
    /// Every row, as deltalake read it.
    pub deltalake: Vec<String>,
    /// Every row, as DuckDB read it.
    pub duckdb: Vec<String>,
}

impl DeltaRead {
    /// Both readers read exactly `want` (the oracle's rows, see
    /// [`oracle_rows`]).
    pub fn assert_rows(&self, want: &[String]) {
        assert_eq!(
            normalized(&self.deltalake),
            want,
            "the rows deltalake reads"
        );
        assert_eq!(normalized(&self.duckdb), want, "the rows DuckDB reads");
    }
}

/// The txn version of `app` in each commit of the Delta table at `table`
/// that has one, by version, and how many commits are `app`'s
/// compactions (which have none). Any other commit fails the test.
pub fn delta_txns(table: &Path, app: &str) -> (Vec<(u64, u64)>, usize) {
    let log = table.join(LOG_DIR);
    let mut names: Vec<String> = std::fs::read_dir(&log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let (mut out, mut compactions) = (Vec::new(), 0);
    for name in names {
        let bytes = std::fs::read(log.join(&name)).unwrap();
        let version: u64 = name.trim_end_matches(".json").parse().unwrap();
        match txn_version(&bytes, app, &name).unwrap() {
            Some(txn) => out.push((version, txn)),
            None if changes_of(&bytes, &name).unwrap().compacted_by.as_deref() == Some(app) => {
                compactions += 1
            }
            None => panic!("{name} is neither a batch nor a compaction of {app}"),
        }
    }
    (out, compactions)
}

fn python() -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/lake/venv/bin/python");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/deps.sh test",
        bin.display()
    );
    bin
}

/// Reads the Delta table at `path` with both readers; `app_id`'s txn
/// version too. Panics with the readers' error when either fails.
pub fn read_delta(path: &Path, app_id: &str) -> DeltaRead {
    read_delta_with(path.to_str().expect("a UTF-8 path"), app_id, &[])
}

/// [`read_delta`] of the table at `location` (a path or `s3://...`), the
/// readers run with `env` (an S3 server's).
pub fn read_delta_with(location: &str, app_id: &str, env: &[(String, String)]) -> DeltaRead {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lake/read_delta.py");
    let path = location;
    let out = Command::new(python())
        .arg(script)
        .arg(path)
        .arg(app_id)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("the Delta readers run");
    assert!(
        out.status.success(),
        "the Delta readers failed on {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the Delta readers' output: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The oracle's rows as the readers print them: timestamps as
/// microseconds since the epoch, normalized (see [`normalized`]).
pub fn oracle_rows(batches: &[RecordBatch]) -> Vec<String> {
    let plain: Vec<RecordBatch> = batches
        .iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .map(|c| match c.data_type() {
                    DataType::Timestamp(_, _) => {
                        let us = DataType::Timestamp(TimeUnit::Microsecond, None);
                        let c = arrow_cast::cast(c, &us).expect("to microseconds");
                        arrow_cast::cast(&c, &DataType::Int64).expect("to integers")
                    }
                    _ => c.clone(),
                })
                .collect::<Vec<_>>();
            let fields: Vec<_> = b
                .schema()
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
                .collect();
            let schema = std::sync::Arc::new(arrow_schema::Schema::new(fields));
            RecordBatch::try_new(schema, columns).expect("a plain batch")
        })
        .collect();
    let text = sluice_common::sink::encode_jsonl(&plain).expect("oracle rows encode");
    let lines: Vec<String> = std::str::from_utf8(&text)
        .expect("UTF-8")
        .lines()
        .map(str::to_string)
        .collect();
    normalized(&lines)
}

/// What the readers read of an Iceberg table.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct IcebergRead {
    /// The summaries of the current snapshot and its ancestors, newest
    /// first.
    pub snapshots: Vec<std::collections::BTreeMap<String, String>>,
    /// The data files of the current snapshot.
    pub files: usize,
    /// Every row, as pyiceberg read it.
    pub pyiceberg: Vec<String>,
    /// Every row, as DuckDB read it.
    pub duckdb: Vec<String>,
}

impl IcebergRead {
    /// Both readers read exactly `want` (the oracle's rows, see
    /// [`oracle_rows`]).
    pub fn assert_rows(&self, want: &[String]) {
        assert_eq!(
            normalized(&self.pyiceberg),
            want,
            "the rows pyiceberg reads"
        );
        assert_eq!(normalized(&self.duckdb), want, "the rows DuckDB reads");
    }

    /// The batches of `query`'s snapshots, oldest first.
    pub fn batches_of(&self, query: &str) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .snapshots
            .iter()
            .filter(|s| s.get("sluice.query-id").map(String::as_str) == Some(query))
            .map(|s| s["sluice.batch"].parse().expect("a batch number"))
            .collect();
        out.reverse();
        out
    }
}

/// Reads table `namespace.table` of the SQL catalog `name` in the SQLite
/// file `catalog` with both readers. Panics with the readers' error when
/// either fails.
pub fn read_iceberg(catalog: &Path, name: &str, namespace: &str, table: &str) -> IcebergRead {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lake/read_iceberg.py");
    let out = Command::new(python())
        .arg(script)
        .arg(catalog)
        .args([name, namespace, table])
        .output()
        .expect("the Iceberg readers run");
    assert!(
        out.status.success(),
        "the Iceberg readers failed on {namespace}.{table}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the Iceberg readers' output: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Appends `count` rows, `first`, `first + 1`, ..., to the one-column
/// (`value`) table `namespace.table` of the SQL catalog `name` in
/// `catalog`, one pyiceberg snapshot each, as another writer; returns how
/// many of its commits lost a race and were tried again.
pub fn append_iceberg(
    catalog: &Path,
    name: &str,
    (namespace, table): (&str, &str),
    (first, count): (i64, u64),
) -> u64 {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lake/append_iceberg.py");
    let out = Command::new(python())
        .arg(script)
        .arg(catalog)
        .args([
            name,
            namespace,
            table,
            &first.to_string(),
            &count.to_string(),
        ])
        .output()
        .expect("pyiceberg runs");
    assert!(
        out.status.success(),
        "pyiceberg's appends to {namespace}.{table} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {text}"))
}
