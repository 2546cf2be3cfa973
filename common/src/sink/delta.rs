//! The Delta Lake transaction log as an append-only writer speaks it:
//! commit file names, a table's schema in Delta's JSON form, and one
//! commit's actions; and, read back, the last batch a query committed.
//!
//! ```text
//! <table>/_delta_log/<version:020>.json    one commit: newline-delimited actions
//!   version 0:  commitInfo, protocol {1, 2}, metaData (id, schemaString, partitionColumns)
//!   each:       commitInfo, add (one per data file), txn {appId: query, version: batch}
//! ```
//!
//! A commit file is created only if its name is free (a conditional put):
//! two writers racing on one version are settled by the store, never by
//! overwriting. Exactly-once rests on the `txn` action: a batch whose
//! number is at or below the query's last `txn` version is in the table
//! already, and is not committed again.
//!
//! Reader version 1 and writer version 2 need no table features, so every
//! Delta reader can read the table.

use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

use super::delta_table::{actions, corrupt};
use crate::error::{Error, Result};

/// The directory of a table's commits.
pub const LOG_DIR: &str = "_delta_log";

/// The name of commit `version`, relative to the table's root.
pub fn commit_name(version: u64) -> String {
    format!("{LOG_DIR}/{version:020}.json")
}

/// The version of a commit file named `name` (its file name alone);
/// `None` for the log's other files (checkpoints, checksums, temporary
/// files).
pub fn version_of(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The table's schema as Delta's `schemaString`: every column nullable or
/// not as the query's output is. A type Delta has no counterpart for is
/// refused, naming its column.
pub fn schema_string(schema: &Schema) -> Result<String> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| field(f, f.name()))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({"type": "struct", "fields": fields}).to_string())
}

fn field(f: &Field, path: &str) -> Result<Value> {
    Ok(json!({
        "name": f.name(),
        "type": delta_type(f.data_type(), path)?,
        "nullable": f.is_nullable(),
        "metadata": {},
    }))
}

/// Delta's type for an Arrow type; `path` names the column in an error.
fn delta_type(t: &DataType, path: &str) -> Result<Value> {
    use DataType::*;
    let primitive = match t {
        Boolean => "boolean",
        Int8 => "byte",
        Int16 | UInt8 => "short",
        Int32 | UInt16 => "integer",
        Int64 | UInt32 => "long",
        Float32 => "float",
        Float64 => "double",
        Utf8 | LargeUtf8 | Utf8View => "string",
        Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => "binary",
        Date32 | Date64 => "date",
        Timestamp(_, _) => "timestamp",
        Decimal128(p, s) if *p <= 38 && *s >= 0 => return Ok(json!(format!("decimal({p},{s})"))),
        Dictionary(_, values) => return delta_type(values, path),
        Struct(fields) => {
            let fields = fields
                .iter()
                .map(|f| field(f, &format!("{path}.{}", f.name())))
                .collect::<Result<Vec<_>>>()?;
            return Ok(json!({"type": "struct", "fields": fields}));
        }
        List(item) | LargeList(item) | ListView(item) | FixedSizeList(item, _) => {
            return Ok(json!({
                "type": "array",
                "elementType": delta_type(item.data_type(), &format!("{path}[]"))?,
                "containsNull": item.is_nullable(),
            }));
        }
        Map(entries, _) => return map_type(entries, path),
        other => {
            return Err(Error::Encoding(format!(
                "column `{path}` is of type {other}, which a Delta table cannot hold"
            )));
        }
    };
    Ok(json!(primitive))
}

fn map_type(entries: &Field, path: &str) -> Result<Value> {
    let DataType::Struct(kv) = entries.data_type() else {
        return Err(Error::Encoding(format!(
            "column `{path}` is a map whose entries are not a struct"
        )));
    };
    let [key, value] = &kv.iter().collect::<Vec<_>>()[..] else {
        return Err(Error::Encoding(format!(
            "column `{path}` is a map whose entries are not (key, value)"
        )));
    };
    Ok(json!({
        "type": "map",
        "keyType": delta_type(key.data_type(), &format!("{path}.key"))?,
        "valueType": delta_type(value.data_type(), &format!("{path}.value"))?,
        "valueContainsNull": value.is_nullable(),
    }))
}

/// A table created by a commit: what its first commit says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTable {
    /// The table's id (a UUID).
    pub id: String,
    /// [`schema_string`] of the query's output.
    pub schema_string: String,
    /// The columns whose values name a data file's directory.
    pub partition_columns: Vec<String>,
}

/// A data file added by a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddFile {
    /// Relative to the table's root, `/`-separated, as named on storage
    /// (the commit stores it as a URI).
    pub path: String,
    /// Each partition column's value in this file (`None`: null).
    pub partition_values: Vec<(String, Option<String>)>,
    pub size: u64,
    pub modification_time_ms: i64,
    pub num_records: u64,
}

/// One commit of query `app_id`'s batch `batch`: the table's creation
/// (its first commit), the batch's data files, and the batch as the
/// query's transaction version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit<'a> {
    pub created: Option<&'a NewTable>,
    pub files: &'a [AddFile],
    pub app_id: &'a str,
    pub batch: u64,
    pub now_ms: i64,
}

impl Commit<'_> {
    /// The commit file's bytes: one action per line.
    pub fn encode(&self) -> String {
        let mut actions = vec![json!({"commitInfo": {
            "timestamp": self.now_ms,
            "operation": "STREAMING UPDATE",
            "operationParameters": {"outputMode": "Append", "queryId": self.app_id, "epochId": self.batch.to_string()},
            "engineInfo": concat!("sluice/", env!("CARGO_PKG_VERSION")),
        }})];
        if let Some(t) = self.created {
            actions.push(json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}));
            actions.push(json!({"metaData": {
                "id": t.id,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": t.schema_string,
                "partitionColumns": t.partition_columns,
                "configuration": {},
                "createdTime": self.now_ms,
            }}));
        }
        actions.extend(self.files.iter().map(|f| add_action(f, true)));
        actions.push(json!({"txn": {
            "appId": self.app_id,
            "version": self.batch,
            "lastUpdated": self.now_ms,
        }}));
        let mut out = String::new();
        for a in actions {
            out.push_str(&a.to_string());
            out.push('\n');
        }
        out
    }
}

/// The `add` action of `f`; `data_change: false` for a file that holds
/// rows the table has already (a compaction's).
pub(super) fn add_action(f: &AddFile, data_change: bool) -> Value {
    json!({"add": {
        "path": super::delta_table::add_path(&f.path),
        "partitionValues": partition_values(f),
        "size": f.size,
        "modificationTime": f.modification_time_ms,
        "dataChange": data_change,
        "stats": json!({"numRecords": f.num_records}).to_string(),
    }})
}

/// The `remove` action of `f`, removed at `now_ms`, its rows kept by
/// the files a compaction adds (`dataChange: false`).
pub(super) fn remove_action(f: &AddFile, now_ms: i64) -> Value {
    json!({"remove": {
        "path": super::delta_table::add_path(&f.path),
        "deletionTimestamp": now_ms,
        "dataChange": false,
        "extendedFileMetadata": true,
        "partitionValues": partition_values(f),
        "size": f.size,
    }})
}

fn partition_values(f: &AddFile) -> serde_json::Map<String, Value> {
    f.partition_values
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect()
}

/// The transaction version of `app_id` that commit file `bytes` (named
/// `what` in errors) sets, if any.
pub fn txn_version(bytes: &[u8], app_id: &str, what: &str) -> Result<Option<u64>> {
    let mut found = None;
    for (n, action) in actions(bytes, what)? {
        let Some(txn) = action.get("txn") else {
            continue;
        };
        if txn.get("appId").and_then(Value::as_str) != Some(app_id) {
            continue;
        }
        let version = txn
            .get("version")
            .and_then(Value::as_u64)
            .ok_or_else(|| corrupt(what, n, "a txn without a version"))?;
        if found.replace(version).is_some() {
            return Err(corrupt(what, 0, format!("two txn actions of app {app_id}")));
        }
    }
    Ok(found)
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;
