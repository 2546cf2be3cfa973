//! Compaction of a Delta table's small data files, as `OPTIMIZE` does:
//! the files a query added since its last compaction, grouped by
//! partition directory, each group's rows rewritten into one file, and one
//! commit that removes the group's files and adds the new one
//! (`dataChange: false` on both: readers of a new version see the same
//! rows in fewer files; readers of an older one still find its files,
//! which are never deleted here).
//!
//! ```text
//! commit:  commitInfo {operation: OPTIMIZE, queryId}, remove ..., add ...
//! file:    <dir>/part-<batch:020>-c<uuid>.parquet     (batch: the last one compacted)
//! ```
//!
//! A compaction commit carries no `txn`: where a query stands is the
//! newest commit that has its `txn`, whatever compacted after it.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

use super::delta::{AddFile, add_action, remove_action};
use super::delta_log::{read_commit, versions};
use super::delta_table::{actions, corrupt};
use super::parquet::writer_properties;
use crate::checkpoint::padded;
use crate::error::{Error, Result};
use crate::storage::{Created, Path, Storage};

/// The operation a compaction's `commitInfo` names.
pub const OPERATION: &str = "OPTIMIZE";

/// What one commit did to the table's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<AddFile>,
    /// The paths it removed.
    pub removed: Vec<String>,
    /// The query (its `queryId`) whose compaction it is, if it is one.
    pub compacted_by: Option<String>,
}

/// The changes of commit file `bytes` (named `what` in errors).
pub fn changes_of(bytes: &[u8], what: &str) -> Result<Changes> {
    let mut out = Changes::default();
    for (n, action) in actions(bytes, what)? {
        let path = |a: &Value| -> Result<String> {
            let uri = a["path"]
                .as_str()
                .ok_or_else(|| corrupt(what, n, "a file without a path"))?;
            percent_decode_str(uri)
                .decode_utf8()
                .map(|p| p.into_owned())
                .map_err(|e| corrupt(what, n, e))
        };
        if let Some(info) = action.get("commitInfo") {
            if info["operation"] == OPERATION {
                out.compacted_by = info["operationParameters"]["queryId"]
                    .as_str()
                    .map(str::to_string);
            }
        } else if let Some(add) = action.get("add") {
            let stats: Value = add["stats"]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default();
            let values = add["partitionValues"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            out.added.push(AddFile {
                path: path(add)?,
                partition_values: values
                    .into_iter()
                    .map(|(k, v)| (k, v.as_str().map(str::to_string)))
                    .collect(),
                size: add["size"].as_u64().unwrap_or(0),
                modification_time_ms: add["modificationTime"].as_i64().unwrap_or(0),
                num_records: stats["numRecords"].as_u64().unwrap_or(0),
            });
        } else if let Some(remove) = action.get("remove") {
            out.removed.push(path(remove)?);
        }
    }
    Ok(out)
}

/// The files query `app_id` added since its last compaction (or since the
/// table began) that are still in the table, oldest first.
pub async fn added_since_compaction(storage: &Storage, app_id: &str) -> Result<Vec<AddFile>> {
    let mut removed: HashSet<String> = HashSet::new();
    let mut files = Vec::new();
    for version in versions(storage).await?.into_iter().rev() {
        let (bytes, what) = read_commit(storage, version).await?;
        let changes = changes_of(&bytes, &what)?;
        if changes.compacted_by.as_deref() == Some(app_id) {
            break;
        }
        removed.extend(changes.removed);
        let added = changes.added.into_iter().rev();
        files.extend(added.filter(|f| !removed.contains(&f.path)));
    }
    files.reverse();
    Ok(files)
}

/// The groups to rewrite: per partition directory, the files smaller than
/// half of `target` bytes, in order, cut into groups of at most `target`
/// bytes; a group of one file is left as it is.
pub fn plan(files: &[AddFile], target: u64) -> Vec<Vec<AddFile>> {
    let mut by_dir: BTreeMap<&str, Vec<&AddFile>> = BTreeMap::new();
    for f in files.iter().filter(|f| f.size < target / 2) {
        let dir = f.path.rsplit_once('/').map_or("", |(d, _)| d);
        by_dir.entry(dir).or_default().push(f);
    }
    let mut groups = Vec::new();
    for small in by_dir.into_values() {
        let mut group: Vec<AddFile> = Vec::new();
        let mut bytes = 0;
        for f in small {
            if !group.is_empty() && bytes + f.size > target {
                groups.push(std::mem::take(&mut group));
                bytes = 0;
            }
            bytes += f.size;
            group.push(f.clone());
        }
        groups.push(group);
    }
    groups.retain(|g| g.len() > 1);
    groups
}

/// Rewrites `group`'s rows into one new file in their directory, named
/// for `batch` (the last batch compacted); returns it.
pub async fn rewrite(
    storage: &Storage,
    group: &[AddFile],
    batch: u64,
    now_ms: i64,
) -> Result<AddFile> {
    let first = group.first().expect("a group has files");
    let dir = first.path.rsplit_once('/').map_or("", |(d, _)| d);
    let name = format!(
        "part-{}-c{}.parquet",
        padded(batch),
        uuid::Uuid::new_v4().simple()
    );
    let path = if dir.is_empty() {
        name
    } else {
        format!("{dir}/{name}")
    };
    let mut writer: Option<ArrowWriter<Vec<u8>>> = None;
    let mut rows = 0u64;
    for f in group {
        let key = Path::from(f.path.as_str());
        let what = storage.describe(&key);
        let bytes = storage.get(&key).await?.ok_or_else(|| Error::Corrupt {
            path: what.clone(),
            reason: "a data file the table lists is missing".into(),
        })?;
        let failed = |e: parquet::errors::ParquetError| Error::Corrupt {
            path: what.clone(),
            reason: format!("parquet: {e}"),
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(failed)?;
        for batch in reader {
            let batch = batch.map_err(|e| failed(e.into()))?;
            let w = match &mut writer {
                Some(w) => w,
                None => {
                    let props = writer_properties(batch.schema_ref());
                    let w = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props))
                        .map_err(failed)?;
                    writer.insert(w)
                }
            };
            rows += batch.num_rows() as u64;
            w.write(&batch).map_err(failed)?;
        }
    }
    let writer = writer.ok_or_else(|| Error::Corrupt {
        path: storage.describe(&Path::from(first.path.as_str())),
        reason: "the files to compact hold no row group".into(),
    })?;
    let bytes = writer
        .into_inner()
        .map_err(|e| Error::Encoding(format!("parquet: {e}")))?;
    let size = bytes.len() as u64;
    let key = Path::from(path.as_str());
    if let Created::Existing(_) = storage.create(&key, Bytes::from(bytes)).await? {
        return Err(Error::Conflict {
            path: storage.describe(&key),
        });
    }
    Ok(AddFile {
        path,
        partition_values: first.partition_values.clone(),
        size,
        modification_time_ms: now_ms,
        num_records: rows,
    })
}

/// The commit of a compaction by query `app_id`: each group's files
/// removed and its new file added.
pub fn encode(app_id: &str, removed: &[AddFile], added: &[AddFile], now_ms: i64) -> String {
    let mut actions = vec![json!({"commitInfo": {
        "timestamp": now_ms,
        "operation": OPERATION,
        "operationParameters": {"queryId": app_id, "numRemovedFiles": removed.len(), "numAddedFiles": added.len()},
        "engineInfo": concat!("sluice/", env!("CARGO_PKG_VERSION")),
    }})];
    actions.extend(removed.iter().map(|f| remove_action(f, now_ms)));
    actions.extend(added.iter().map(|f| add_action(f, false)));
    let mut out = String::new();
    for a in actions {
        out.push_str(&a.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "delta_compact_tests.rs"]
mod tests;
