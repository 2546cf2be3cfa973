//! An Iceberg table's metadata file (format version 2): read as any
//! writer wrote it (fields Sluice does not use are kept as they are),
//! created for a new table, and advanced by one appended snapshot.
//!
//! Each snapshot Sluice appends records the query and its batch in its
//! summary ([`QUERY_KEY`], [`BATCH_KEY`]); [`standing`] walks the current
//! snapshot's ancestry to the newest of the query's snapshots, which says
//! the last batch the table holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::schema::Column;
use crate::error::{Error, Result};

/// The snapshot summary key that names the query that appended it.
pub const QUERY_KEY: &str = "sluice.query-id";
/// The snapshot summary key that holds the batch it appended.
pub const BATCH_KEY: &str = "sluice.batch";

/// A table's metadata file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: u8,
    pub table_uuid: String,
    pub location: String,
    pub last_sequence_number: i64,
    pub last_updated_ms: i64,
    pub last_column_id: i32,
    pub schemas: Vec<SchemaJson>,
    pub current_schema_id: i32,
    pub partition_specs: Vec<Value>,
    pub default_spec_id: i32,
    pub last_partition_id: i32,
    #[serde(default, deserialize_with = "snapshot_id")]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub snapshot_log: Vec<Value>,
    #[serde(default)]
    pub metadata_log: Vec<Value>,
    #[serde(default)]
    pub refs: Map<String, Value>,
    /// Every other field, kept as it was written.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A snapshot id where `-1` (as older writers put it) means none.
fn snapshot_id<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<i64>, D::Error> {
    Ok(Option::<i64>::deserialize(d)?.filter(|&id| id >= 0))
}

/// One of the table's schemas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SchemaJson {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema_id: i32,
    pub fields: Vec<Column>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_snapshot_id: Option<i64>,
    #[serde(default)]
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub manifest_list: String,
    #[serde(default)]
    pub summary: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<i32>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl TableMetadata {
    /// Parses a metadata file; `path` names it in errors.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<Self> {
        let meta: TableMetadata = serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
            path: path.to_string(),
            reason: format!("not Iceberg table metadata: {e}"),
        })?;
        if meta.format_version != 2 {
            return Err(Error::Config(format!(
                "the Iceberg table at {} has format version {}; Sluice appends to version 2 tables",
                meta.location, meta.format_version
            )));
        }
        Ok(meta)
    }

    /// A new, empty table at `location` with `columns`, unpartitioned.
    pub fn create(location: &str, columns: Vec<Column>, now_ms: i64) -> Self {
        let last_column_id = columns.iter().map(|c| c.id).max().unwrap_or(0);
        TableMetadata {
            format_version: 2,
            table_uuid: uuid::Uuid::new_v4().to_string(),
            location: location.trim_end_matches('/').to_string(),
            last_sequence_number: 0,
            last_updated_ms: now_ms,
            last_column_id,
            schemas: vec![SchemaJson {
                kind: "struct".into(),
                schema_id: 0,
                fields: columns,
                rest: Map::new(),
            }],
            current_schema_id: 0,
            partition_specs: vec![json!({"spec-id": 0, "fields": []})],
            default_spec_id: 0,
            // No partition field yet: the next one is 1000.
            last_partition_id: 999,
            current_snapshot_id: None,
            snapshots: Vec::new(),
            snapshot_log: Vec::new(),
            metadata_log: Vec::new(),
            refs: Map::new(),
            rest: [
                ("properties".to_string(), json!({})),
                (
                    "sort-orders".to_string(),
                    json!([{"order-id": 0, "fields": []}]),
                ),
                ("default-sort-order-id".to_string(), json!(0)),
            ]
            .into_iter()
            .collect(),
        }
    }

    /// Where the table's data files go: `<location>/data`.
    pub fn data_dir(&self) -> String {
        format!("{}/data", self.location)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("table metadata encodes")
    }

    /// The current schema.
    pub fn schema(&self) -> Result<&SchemaJson> {
        self.schemas
            .iter()
            .find(|s| s.schema_id == self.current_schema_id)
            .ok_or_else(|| Error::Corrupt {
                path: self.location.clone(),
                reason: format!("no schema has the current id {}", self.current_schema_id),
            })
    }

    /// Whether the default partition spec has no field.
    pub fn unpartitioned(&self) -> bool {
        self.partition_specs
            .iter()
            .find(|s| s["spec-id"] == self.default_spec_id)
            .is_some_and(|s| s["fields"].as_array().is_some_and(Vec::is_empty))
    }

    /// The current snapshot.
    pub fn current(&self) -> Option<&Snapshot> {
        let id = self.current_snapshot_id?;
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The current snapshot and its ancestors, newest first, as far as
    /// the table keeps them.
    pub fn ancestry(&self) -> impl Iterator<Item = &Snapshot> {
        let by_id: BTreeMap<i64, &Snapshot> =
            self.snapshots.iter().map(|s| (s.snapshot_id, s)).collect();
        std::iter::successors(self.current(), move |s| {
            by_id.get(&s.parent_snapshot_id?).copied()
        })
    }

    /// This table with `snapshot` appended and made current; `previous`
    /// is the metadata file this one replaces.
    pub fn append(&self, snapshot: Snapshot, previous: &str) -> Self {
        let mut next = self.clone();
        next.last_sequence_number = snapshot.sequence_number;
        next.last_updated_ms = snapshot.timestamp_ms;
        next.current_snapshot_id = Some(snapshot.snapshot_id);
        next.refs.insert(
            "main".into(),
            json!({"snapshot-id": snapshot.snapshot_id, "type": "branch"}),
        );
        next.snapshot_log.push(json!({
            "snapshot-id": snapshot.snapshot_id,
            "timestamp-ms": snapshot.timestamp_ms,
        }));
        next.metadata_log.push(json!({
            "metadata-file": previous,
            "timestamp-ms": self.last_updated_ms,
        }));
        next.snapshots.push(snapshot);
        next
    }
}

/// The newest batch of query `query_id` in the current snapshot's
/// ancestry; `None` when no snapshot there is the query's.
pub fn standing(meta: &TableMetadata, query_id: &str) -> Result<Option<u64>> {
    let Some(ours) = meta
        .ancestry()
        .find(|s| s.summary.get(QUERY_KEY).map(String::as_str) == Some(query_id))
    else {
        return Ok(None);
    };
    let batch = ours.summary.get(BATCH_KEY).and_then(|b| b.parse().ok());
    batch.map(Some).ok_or_else(|| Error::Corrupt {
        path: meta.location.clone(),
        reason: format!(
            "snapshot {} of query {query_id} has no {BATCH_KEY}",
            ours.snapshot_id
        ),
    })
}

/// The summary of a snapshot of query `query_id` that appends batch
/// `batch`: `added` files holding `records` rows in `bytes` bytes, on top
/// of the `parent` snapshot's totals (each total is written only when the
/// parent has it, or there is no parent).
pub fn summary(
    (query_id, batch): (&str, u64),
    (added, records, bytes): (u64, u64, u64),
    parent: Option<&Snapshot>,
) -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    s.insert("operation".into(), "append".into());
    s.insert(QUERY_KEY.into(), query_id.into());
    s.insert(BATCH_KEY.into(), batch.to_string());
    s.insert("added-data-files".into(), added.to_string());
    s.insert("added-records".into(), records.to_string());
    s.insert("added-files-size".into(), bytes.to_string());
    for (total, add) in [
        ("total-data-files", added),
        ("total-records", records),
        ("total-files-size", bytes),
    ] {
        let before = match parent {
            None => Some(0),
            Some(p) => p.summary.get(total).and_then(|v| v.parse::<u64>().ok()),
        };
        if let Some(before) = before {
            s.insert(total.into(), (before + add).to_string());
        }
    }
    for zero in [
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    ] {
        let before = parent.map_or(Some("0"), |p| p.summary.get(zero).map(String::as_str));
        if let Some(v) = before {
            s.insert(zero.into(), v.into());
        }
    }
    s
}

/// The snapshot summary key that names the query whose compaction a
/// snapshot is.
pub const COMPACTED_BY_KEY: &str = "sluice.compacted-by";

/// The summary of query `query_id`'s compaction: `added` files (count,
/// rows, bytes) replace `deleted` ones, on top of `parent`'s totals.
pub fn replace_summary(
    query_id: &str,
    added: (u64, u64, u64),
    deleted: (u64, u64, u64),
    parent: Option<&Snapshot>,
) -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    s.insert("operation".into(), "replace".into());
    s.insert(COMPACTED_BY_KEY.into(), query_id.into());
    for (key, n) in [
        ("added-data-files", added.0),
        ("added-records", added.1),
        ("added-files-size", added.2),
        ("deleted-data-files", deleted.0),
        ("deleted-records", deleted.1),
        ("removed-files-size", deleted.2),
    ] {
        s.insert(key.into(), n.to_string());
    }
    for (total, add, remove) in [
        ("total-data-files", added.0, deleted.0),
        ("total-records", added.1, deleted.1),
        ("total-files-size", added.2, deleted.2),
    ] {
        let before = parent.and_then(|p| p.summary.get(total)?.parse::<u64>().ok());
        if let Some(before) = before {
            s.insert(
                total.into(),
                (before + add).saturating_sub(remove).to_string(),
            );
        }
    }
    for zero in [
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    ] {
        if let Some(v) = parent.and_then(|p| p.summary.get(zero)) {
            s.insert(zero.into(), v.clone());
        }
    }
    s
}

/// The name of the metadata file after `previous` (`None` for a new
/// table): `metadata/<version:05>-<uuid>.metadata.json` under the table.
pub fn next_metadata_name(previous: Option<&str>) -> String {
    let version = previous
        .and_then(|p| p.rsplit('/').next())
        .and_then(|name| name.split('-').next())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |v| v + 1);
    format!(
        "metadata/{version:05}-{}.metadata.json",
        uuid::Uuid::new_v4()
    )
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;
