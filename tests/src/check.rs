//! Checks over what a run left on disk: the exactly-once checker on a sink,
//! and the checkpoint logs (`offsets/`, `commits/`) of a query.

use std::path::{Path, PathBuf};

use sluice_common::checkpoint::{FileLogEntry, Log, OffsetRecord, QUERIES_DIR};
use sluice_common::storage::Stores;
use sluice_common::verify::{Report, verify_sink};

/// Runs the exactly-once checker on `sink` for the values `0..total`.
/// Panics with the whole report unless it is exact.
pub async fn assert_exactly_once(sink: &Path, total: u64) -> Report {
    let location = sink.to_str().expect("utf-8 sink path");
    assert_exactly_once_at(&Stores::default(), location, total).await
}

/// [`assert_exactly_once`] for a sink at any location (`s3://...`),
/// read through `stores`.
pub async fn assert_exactly_once_at(stores: &Stores, location: &str, total: u64) -> Report {
    let report = verify_sink(stores, location, Some(total))
        .await
        .unwrap_or_else(|e| panic!("checker could not read sink {location}: {e}"));
    assert!(
        report.is_exact() && report.rows == total,
        "sink {location} is not exactly-once for 0..{total}: {report:#?}"
    );
    report
}

/// `<root>/queries/<query>` ([`QUERIES_DIR`]).
pub fn query_dir(checkpoint_root: &Path, query: &str) -> PathBuf {
    checkpoint_root.join(QUERIES_DIR).join(query)
}

/// The entries of a query's log as `(batch id, path)`, in batch order.
/// Temporary files are skipped.
pub fn log_entries(checkpoint_root: &Path, query: &str, log: Log) -> Vec<(u64, PathBuf)> {
    let dir = query_dir(checkpoint_root, query).join(log.dir());
    let mut out: Vec<(u64, PathBuf)> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name
                    .parse::<u64>()
                    .ok()
                    .filter(|_| !name.starts_with('.'))?;
                Some((id, e.path()))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// The highest batch id in a log, with its path.
pub fn latest_entry(checkpoint_root: &Path, query: &str, log: Log) -> Option<(u64, PathBuf)> {
    log_entries(checkpoint_root, query, log).pop()
}

/// Every record of a query's log decoded as `T`, with its batch id, in batch order.
/// Panics on a record that cannot be read or decoded.
pub fn log_records<T: serde::de::DeserializeOwned>(
    checkpoint_root: &Path,
    query: &str,
    log: Log,
) -> Vec<(u64, T)> {
    log_entries(checkpoint_root, query, log)
        .into_iter()
        .map(|(id, path)| {
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let record = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{} does not decode: {e}", path.display()));
            (id, record)
        })
        .collect()
}

/// The plans `offsets/N` of `query` still on disk, in batch order.
pub fn offset_records(checkpoint_root: &Path, query: &str) -> Vec<OffsetRecord> {
    log_records::<OffsetRecord>(checkpoint_root, query, Log::Offsets)
        .into_iter()
        .map(|(id, r)| {
            assert_eq!(r.batch_id, id, "offsets/{id} holds batch {}", r.batch_id);
            r
        })
        .collect()
}

/// The file source's log `sources/files/N` of `query` (never purged): the
/// files each batch took, as `(N, file names)`, in batch order.
pub fn file_log(checkpoint_root: &Path, query: &str) -> Vec<(u64, Vec<String>)> {
    log_records::<FileLogEntry>(checkpoint_root, query, Log::SourceFiles)
        .into_iter()
        .map(|(id, e)| {
            assert_eq!(
                e.batch_id, id,
                "sources/files/{id} holds batch {}",
                e.batch_id
            );
            (id, e.files)
        })
        .collect()
}

/// `(batch_id, epoch)` of every commit record of `query`, in batch order.
/// Panics on a record that cannot be read.
pub fn commit_epochs(checkpoint_root: &Path, query: &str) -> Vec<(u64, u64)> {
    /// The fields of a commit record this reads; the others may be absent.
    #[derive(serde::Deserialize)]
    struct Commit {
        batch_id: u64,
        epoch: u64,
    }
    log_records::<Commit>(checkpoint_root, query, Log::Commits)
        .into_iter()
        .map(|(id, r)| {
            assert_eq!(r.batch_id, id, "commits/{id} holds batch_id {}", r.batch_id);
            (r.batch_id, r.epoch)
        })
        .collect()
}

/// Asserts that the epochs in `commits/` never decrease as N grows, and
/// that there is at least one commit. Returns `(batch_id, epoch)` pairs.
pub fn assert_epochs_non_decreasing(checkpoint_root: &Path, query: &str) -> Vec<(u64, u64)> {
    let epochs = commit_epochs(checkpoint_root, query);
    assert!(
        !epochs.is_empty(),
        "{query} has no commits under {}",
        checkpoint_root.display()
    );
    for w in epochs.windows(2) {
        assert!(
            w[0].1 <= w[1].1,
            "{query}: epoch decreased from batch {} (epoch {}) to batch {} (epoch {}); all: {epochs:?}",
            w[0].0,
            w[0].1,
            w[1].0,
            w[1].1
        );
    }
    epochs
}

/// Every regular file under `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// True when `json` (any nesting of arrays and objects) holds an object
/// whose `name` is `name`.
pub fn json_has_query(json: &serde_json::Value, name: &str) -> bool {
    match json {
        serde_json::Value::Object(m) => {
            m.get("name").and_then(|v| v.as_str()) == Some(name)
                || m.values().any(|v| json_has_query(v, name))
        }
        serde_json::Value::Array(a) => a.iter().any(|v| json_has_query(v, name)),
        _ => false,
    }
}
