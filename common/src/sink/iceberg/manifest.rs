//! Iceberg's manifests and manifest lists (format version 2): Avro
//! container files, deflate-compressed. A manifest lists one snapshot's
//! added data files; a snapshot's manifest list is its parent's, entry for
//! entry (read as any writer wrote it, resolved to the v2 schema), with
//! the new manifest's entry after them: a fast append.

use std::sync::LazyLock;

use apache_avro::types::{Record, Value};
use apache_avro::{Codec, DeflateSettings, Reader, Schema, Writer};

use super::metadata::TableMetadata;
use crate::error::{Error, Result};

/// The v2 manifest list's Avro schema (Iceberg spec, "Manifest Lists").
const MANIFEST_LIST: &str = r#"{"type": "record", "name": "manifest_file", "fields": [
  {"name": "manifest_path", "type": "string", "field-id": 500},
  {"name": "manifest_length", "type": "long", "field-id": 501},
  {"name": "partition_spec_id", "type": "int", "field-id": 502},
  {"name": "content", "type": "int", "default": 0, "field-id": 517},
  {"name": "sequence_number", "type": "long", "default": 0, "field-id": 515},
  {"name": "min_sequence_number", "type": "long", "default": 0, "field-id": 516},
  {"name": "added_snapshot_id", "type": "long", "field-id": 503},
  {"name": "added_files_count", "type": "int", "field-id": 504},
  {"name": "existing_files_count", "type": "int", "field-id": 505},
  {"name": "deleted_files_count", "type": "int", "field-id": 506},
  {"name": "added_rows_count", "type": "long", "field-id": 512},
  {"name": "existing_rows_count", "type": "long", "field-id": 513},
  {"name": "deleted_rows_count", "type": "long", "field-id": 514},
  {"name": "partitions", "type": ["null", {"type": "array", "element-id": 508, "items":
    {"type": "record", "name": "r508", "fields": [
      {"name": "contains_null", "type": "boolean", "field-id": 509},
      {"name": "contains_nan", "type": ["null", "boolean"], "default": null, "field-id": 518},
      {"name": "lower_bound", "type": ["null", "bytes"], "default": null, "field-id": 510},
      {"name": "upper_bound", "type": ["null", "bytes"], "default": null, "field-id": 511}]}}],
   "default": null, "field-id": 507},
  {"name": "key_metadata", "type": ["null", "bytes"], "default": null, "field-id": 519}
]}"#;

/// The v2 manifest's Avro schema for an unpartitioned table (Iceberg
/// spec, "Manifests"); the data files' statistics are not written.
const MANIFEST: &str = r#"{"type": "record", "name": "manifest_entry", "fields": [
  {"name": "status", "type": "int", "field-id": 0},
  {"name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1},
  {"name": "sequence_number", "type": ["null", "long"], "default": null, "field-id": 3},
  {"name": "file_sequence_number", "type": ["null", "long"], "default": null, "field-id": 4},
  {"name": "data_file", "field-id": 2, "type": {"type": "record", "name": "r2", "fields": [
    {"name": "content", "type": "int", "field-id": 134},
    {"name": "file_path", "type": "string", "field-id": 100},
    {"name": "file_format", "type": "string", "field-id": 101},
    {"name": "partition", "field-id": 102, "type": {"type": "record", "name": "r102", "fields": []}},
    {"name": "record_count", "type": "long", "field-id": 103},
    {"name": "file_size_in_bytes", "type": "long", "field-id": 104}]}}
]}"#;

static LIST_SCHEMA: LazyLock<Schema> =
    LazyLock::new(|| Schema::parse_str(MANIFEST_LIST).expect("the manifest list schema parses"));
static MANIFEST_SCHEMA: LazyLock<Schema> =
    LazyLock::new(|| Schema::parse_str(MANIFEST).expect("the manifest schema parses"));

/// One entry of a manifest list, as read: copied into the next list as
/// it is.
pub type ListEntry = Value;

/// The manifest an entry of a manifest list names, and its sequence
/// number.
pub fn manifest_of(e: &ListEntry) -> Option<(&str, i64, i64)> {
    match (
        field(e, "manifest_path"),
        field(e, "sequence_number"),
        field(e, "added_snapshot_id"),
    ) {
        (Some(Value::String(p)), Some(Value::Long(seq)), Some(Value::Long(by))) => {
            Some((p.as_str(), *seq, *by))
        }
        _ => None,
    }
}

/// A manifest entry's status (Iceberg spec, "Manifests").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The file was in the table before the manifest's snapshot.
    Existing = 0,
    /// The manifest's snapshot added the file.
    Added = 1,
    /// The manifest's snapshot removed the file.
    Deleted = 2,
}

/// One entry of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub status: Status,
    /// The snapshot that added the file (or, deleted, removed it).
    pub snapshot_id: i64,
    /// The file's data and file sequence numbers; `None` (for an added
    /// file) inherits the manifest's.
    pub sequence_number: Option<i64>,
    pub file_sequence_number: Option<i64>,
    pub file: DataFile,
}

impl Entry {
    /// A file added by snapshot `snapshot_id`.
    pub fn added(snapshot_id: i64, file: DataFile) -> Self {
        Entry {
            status: Status::Added,
            snapshot_id,
            sequence_number: None,
            file_sequence_number: None,
            file,
        }
    }
}

/// One data file a batch adds: its full path, rows and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    pub path: String,
    pub records: u64,
    pub bytes: u64,
}

/// A manifest written for a snapshot, as its manifest list names it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewManifest {
    pub path: String,
    pub length: u64,
    pub snapshot_id: i64,
    /// Files and rows added, existing and deleted.
    pub files: u64,
    pub records: u64,
    pub existing: (u64, u64),
    pub deleted: (u64, u64),
    /// The least data sequence number of its live entries, when it is
    /// below the snapshot's.
    pub min_sequence: Option<i64>,
}

impl NewManifest {
    /// The manifest at `path` (`length` bytes) of `entries`, written for
    /// snapshot `snapshot_id`.
    pub fn of(path: String, length: u64, snapshot_id: i64, entries: &[Entry]) -> Self {
        let count = |status: Status| {
            let of = entries.iter().filter(|e| e.status == status);
            (of.clone().count() as u64, of.map(|e| e.file.records).sum())
        };
        let (files, records) = count(Status::Added);
        let min_sequence = entries
            .iter()
            .filter(|e| e.status != Status::Deleted)
            .filter_map(|e| e.sequence_number)
            .min();
        NewManifest {
            path,
            length,
            snapshot_id,
            files,
            records,
            existing: count(Status::Existing),
            deleted: count(Status::Deleted),
            min_sequence,
        }
    }
}

fn avro(what: &str, e: apache_avro::Error) -> Error {
    Error::Encoding(format!("{what}: {e}"))
}

fn deflate() -> Codec {
    Codec::Deflate(DeflateSettings::default())
}

/// A manifest of `meta`'s table holding `entries`.
pub fn encode_manifest(meta: &TableMetadata, entries: &[Entry]) -> Result<Vec<u8>> {
    let schema = &*MANIFEST_SCHEMA;
    let mut w =
        Writer::with_codec(schema, Vec::new(), deflate()).map_err(|e| avro("an Avro writer", e))?;
    let table_schema = serde_json::to_string(meta.schema()?).expect("a schema encodes");
    let metadata = [
        ("schema", table_schema),
        ("schema-id", meta.current_schema_id.to_string()),
        ("partition-spec", "[]".to_string()),
        ("partition-spec-id", meta.default_spec_id.to_string()),
        ("format-version", "2".to_string()),
        ("content", "data".to_string()),
    ];
    for (k, v) in metadata {
        w.add_user_metadata(k.to_string(), v)
            .map_err(|e| avro("manifest metadata", e))?;
    }
    let Schema::Record(entry) = schema else {
        unreachable!("the manifest schema is a record")
    };
    let data_schema = &entry.fields[4].schema;
    let optional = |v: Option<i64>| match v {
        Some(n) => union(1, Value::Long(n)),
        None => union(0, Value::Null),
    };
    for entry in entries {
        let f = &entry.file;
        let mut data = Record::new(data_schema).expect("data_file is a record");
        data.put("content", Value::Int(0));
        data.put("file_path", Value::String(f.path.clone()));
        data.put("file_format", Value::String("PARQUET".into()));
        data.put("partition", Value::Record(Vec::new()));
        data.put("record_count", Value::Long(f.records as i64));
        data.put("file_size_in_bytes", Value::Long(f.bytes as i64));
        let mut e = Record::new(schema).expect("manifest_entry is a record");
        e.put("status", Value::Int(entry.status as i32));
        e.put("snapshot_id", union(1, Value::Long(entry.snapshot_id)));
        e.put("sequence_number", optional(entry.sequence_number));
        e.put("file_sequence_number", optional(entry.file_sequence_number));
        e.put("data_file", Value::from(data));
        w.append_value(e).map_err(|e| avro("a manifest entry", e))?;
    }
    w.into_inner().map_err(|e| avro("a manifest", e))
}

fn union(branch: u32, v: Value) -> Value {
    Value::Union(branch, Box::new(v))
}

/// The entries of the manifest list at `path`, as any writer wrote them,
/// resolved to the v2 schema by field id (as Iceberg readers match
/// fields): a field the writer left out takes the schema's default.
pub fn read_manifest_list(path: &str, bytes: &[u8]) -> Result<Vec<Value>> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_string(),
        reason: format!("not an Iceberg manifest list: {reason}"),
    };
    let reader = Reader::new(bytes).map_err(|e| corrupt(e.to_string()))?;
    let Schema::Record(theirs) = reader.writer_schema() else {
        return Err(corrupt("its schema is not a record".into()));
    };
    let ids: Vec<Option<i64>> = theirs.fields.iter().map(field_id).collect();
    let Schema::Record(ours) = &*LIST_SCHEMA else {
        unreachable!("the manifest list schema is a record")
    };
    let mut out = Vec::new();
    for v in reader {
        let Value::Record(fields) = v.map_err(|e| corrupt(e.to_string()))? else {
            return Err(corrupt("an entry is not a record".into()));
        };
        let mut by_id: std::collections::HashMap<i64, Value> = ids
            .iter()
            .zip(fields)
            .filter_map(|(id, (_, v))| Some(((*id)?, v)))
            .collect();
        let mut entry = Vec::with_capacity(ours.fields.len());
        for f in &ours.fields {
            let id = field_id(f).expect("every field of the schema has an id");
            let v = match (by_id.remove(&id), &f.default) {
                (Some(v), _) => v
                    .resolve(&f.schema)
                    .map_err(|e| corrupt(format!("field {} (id {id}): {e}", f.name)))?,
                (None, Some(serde_json::Value::Null)) => union(0, Value::Null),
                (None, Some(d)) => Value::try_from(d.clone())
                    .and_then(|v| v.resolve(&f.schema))
                    .map_err(|e| corrupt(format!("field {}: {e}", f.name)))?,
                (None, None) => return Err(corrupt(format!("no field {} (id {id})", f.name))),
            };
            entry.push((f.name.clone(), v));
        }
        out.push(Value::Record(entry));
    }
    Ok(out)
}

/// The Iceberg field id of an Avro record field.
fn field_id(f: &apache_avro::schema::RecordField) -> Option<i64> {
    f.custom_attributes.get("field-id")?.as_i64()
}

/// The manifest list of snapshot `snapshot_id` (child of `parent`, at
/// sequence number `sequence`): the parent's `entries`, then `new`'s.
pub fn encode_manifest_list(
    (snapshot_id, parent, sequence): (i64, Option<i64>, i64),
    entries: Vec<Value>,
    new: &NewManifest,
) -> Result<Vec<u8>> {
    let schema = &*LIST_SCHEMA;
    let mut w =
        Writer::with_codec(schema, Vec::new(), deflate()).map_err(|e| avro("an Avro writer", e))?;
    let metadata = [
        ("snapshot-id", snapshot_id.to_string()),
        (
            "parent-snapshot-id",
            parent.map_or("null".to_string(), |p| p.to_string()),
        ),
        ("sequence-number", sequence.to_string()),
        ("format-version", "2".to_string()),
    ];
    for (k, v) in metadata {
        w.add_user_metadata(k.to_string(), v)
            .map_err(|e| avro("manifest list metadata", e))?;
    }
    for e in entries {
        w.append_value(e)
            .map_err(|e| avro("an inherited manifest list entry", e))?;
    }
    let mut e = Record::new(schema).expect("manifest_file is a record");
    e.put("manifest_path", Value::String(new.path.clone()));
    e.put("manifest_length", Value::Long(new.length as i64));
    e.put("partition_spec_id", Value::Int(0));
    e.put("content", Value::Int(0));
    let min = new.min_sequence.map_or(sequence, |m| m.min(sequence));
    e.put("sequence_number", Value::Long(sequence));
    e.put("min_sequence_number", Value::Long(min));
    e.put("added_snapshot_id", Value::Long(new.snapshot_id));
    e.put("added_files_count", Value::Int(new.files as i32));
    e.put("existing_files_count", Value::Int(new.existing.0 as i32));
    e.put("deleted_files_count", Value::Int(new.deleted.0 as i32));
    e.put("added_rows_count", Value::Long(new.records as i64));
    e.put("existing_rows_count", Value::Long(new.existing.1 as i64));
    e.put("deleted_rows_count", Value::Long(new.deleted.1 as i64));
    e.put("partitions", union(1, Value::Array(Vec::new())));
    e.put("key_metadata", union(0, Value::Null));
    w.append_value(e)
        .map_err(|e| avro("a manifest list entry", e))?;
    w.into_inner().map_err(|e| avro("a manifest list", e))
}

/// The entries of a manifest Sluice wrote (at `path`), their inherited
/// sequence numbers made explicit with `sequence`, its manifest list
/// entry's.
pub fn read_manifest(path: &str, bytes: &[u8], sequence: i64) -> Result<Vec<Entry>> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_string(),
        reason: format!("not an Iceberg manifest of Sluice's: {reason}"),
    };
    let reader = Reader::new(bytes).map_err(|e| corrupt(e.to_string()))?;
    let long = |v: Option<&Value>| match v {
        Some(Value::Long(n)) => Some(*n),
        Some(Value::Union(_, v)) => match **v {
            Value::Long(n) => Some(n),
            _ => None,
        },
        _ => None,
    };
    let mut out = Vec::new();
    for v in reader {
        let v = v.map_err(|e| corrupt(e.to_string()))?;
        let data =
            field(&v, "data_file").ok_or_else(|| corrupt("an entry has no data_file".into()))?;
        let status = match field(&v, "status") {
            Some(Value::Int(0)) => Status::Existing,
            Some(Value::Int(1)) => Status::Added,
            Some(Value::Int(2)) => Status::Deleted,
            other => return Err(corrupt(format!("status {other:?}"))),
        };
        let Some(Value::String(file_path)) = field(data, "file_path") else {
            return Err(corrupt("an entry has no file_path".into()));
        };
        let number =
            |name: &str| long(field(data, name)).ok_or_else(|| corrupt(format!("no {name}")));
        out.push(Entry {
            status,
            snapshot_id: long(field(&v, "snapshot_id"))
                .ok_or_else(|| corrupt("no snapshot_id".into()))?,
            sequence_number: Some(long(field(&v, "sequence_number")).unwrap_or(sequence)),
            file_sequence_number: Some(long(field(&v, "file_sequence_number")).unwrap_or(sequence)),
            file: DataFile {
                path: file_path.clone(),
                records: number("record_count")? as u64,
                bytes: number("file_size_in_bytes")? as u64,
            },
        });
    }
    Ok(out)
}

/// A field of a record `v` read by [`read_manifest_list`].
pub fn field<'v>(v: &'v Value, name: &str) -> Option<&'v Value> {
    match v {
        Value::Record(fields) => fields.iter().find(|(n, _)| n == name).map(|(_, v)| v),
        _ => None,
    }
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
