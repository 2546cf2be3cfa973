//! The file sink.
//!
//! ```text
//! <path>/[<col>=<value>/...]part-<batch:020>-<partition:05>[-<seq:04>].<ext>
//!                                                one file of a task's rows
//! <path>/_sluice/<batch:020>                     the batch's manifest
//! <path>/.../.<name>.<uuid>.tmp                  in-flight writes (skipped by readers)
//! ```
//!
//! A task writes one file per output partition directory (`partition_by`),
//! and starts a new one (`seq` 1, 2, ...) when a file reaches the sink's
//! size limit.
//!
//! A part file is written under a temporary name and renamed into place
//! only if its name is free. A retried task writes identical bytes, so a
//! name that is taken is adopted when its bytes match; a mismatch is a
//! [`Error::Conflict`] and is never overwritten.

use crate::storage::Path;
use arrow_array::RecordBatch;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{RECORD_VERSION, encode, padded};
use crate::error::{Error, Result};
use crate::storage::{Created, Storage, Stores, Visible, VisibleWriter};

pub const MANIFEST_DIR: &str = "_sluice";

/// The path of a part file in format `ext`, relative to the sink root:
/// under `dir` (a Hive-style partition directory, or empty), file `seq`
/// of the task (0 has no suffix).
pub fn part_name(dir: &str, batch: u64, partition: u32, seq: u32, ext: &str) -> String {
    let dir = if dir.is_empty() {
        String::new()
    } else {
        format!("{}/", dir.trim_end_matches('/'))
    };
    let seq = if seq == 0 {
        String::new()
    } else {
        format!("-{seq:04}")
    };
    format!("{dir}part-{}-{partition:05}{seq}.{ext}", padded(batch))
}

/// The batch of a temporary part file, `.part-<batch>-<partition>.jsonl.
/// <uuid>.tmp` (with `#N` while an upload is unfinished); `None` for any
/// other name.
pub fn temp_batch(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(".part-")?;
    if !rest.contains(".tmp") {
        return None;
    }
    rest.get(..20)?.parse().ok()
}

/// One file of a batch, as listed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkFile {
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
}

/// The list of files that batch N made visible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkManifest {
    pub version: u32,
    pub batch_id: u64,
    pub epoch: u64,
    pub files: Vec<SinkFile>,
}

/// Encodes rows as JSON lines. Timestamps are written as integers, in
/// milliseconds since the Unix epoch (the rate source's `timestamp_ms` is
/// `{"timestamp_ms":1700000000000}`, a window is
/// `{"w":{"start":1700000000000,"end":1700000010000}}`); the file source
/// reads both that and RFC 3339 text.
pub fn encode_jsonl(batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut buf = Vec::with_capacity(rows * 48);
    {
        let mut w = arrow_json::LineDelimitedWriter::new(&mut buf);
        for b in batches {
            let b = timestamps_as_millis(b)?;
            w.write(&b).map_err(|e| Error::Encoding(e.to_string()))?;
        }
        w.finish().map_err(|e| Error::Encoding(e.to_string()))?;
    }
    Ok(buf)
}

/// `batch` with every timestamp turned into Int64 milliseconds since the
/// epoch (sub-millisecond digits are dropped), in columns and inside
/// structs and lists (a window's `{start, end}`) alike.
fn timestamps_as_millis(batch: &RecordBatch) -> Result<RecordBatch> {
    use arrow_schema::Schema;
    use std::sync::Arc;

    let schema = batch.schema();
    if !schema.fields().iter().any(|f| has_timestamp(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        let (f, c) = as_millis(f, c)?;
        fields.push(f);
        columns.push(c);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::Encoding(e.to_string()))
}

fn has_timestamp(t: &arrow_schema::DataType) -> bool {
    use arrow_schema::DataType;
    match t {
        DataType::Timestamp(..) => true,
        DataType::Struct(fields) => fields.iter().any(|f| has_timestamp(f.data_type())),
        DataType::List(f) | DataType::LargeList(f) => has_timestamp(f.data_type()),
        _ => false,
    }
}

/// One column with its timestamps as milliseconds.
fn as_millis(
    field: &arrow_schema::FieldRef,
    column: &arrow_array::ArrayRef,
) -> Result<(arrow_schema::FieldRef, arrow_array::ArrayRef)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    use arrow_array::{Array, ArrayRef, Int64Array, ListArray, StructArray};
    use arrow_schema::{DataType, Field, Fields, TimeUnit};
    use std::sync::Arc;

    let fail = |e: arrow_schema::ArrowError| Error::Encoding(e.to_string());
    if !has_timestamp(field.data_type()) {
        return Ok((field.clone(), column.clone()));
    }
    let renamed = |t: DataType| Arc::new(Field::new(field.name(), t, field.is_nullable()));
    match field.data_type() {
        DataType::Timestamp(unit, _) => {
            let c = column;
            let millis: Int64Array = match unit {
                TimeUnit::Second => c
                    .as_primitive::<TimestampSecondType>()
                    .unary(|v| v.saturating_mul(1000)),
                TimeUnit::Millisecond => c.as_primitive::<TimestampMillisecondType>().unary(|v| v),
                TimeUnit::Microsecond => c
                    .as_primitive::<TimestampMicrosecondType>()
                    .unary(|v| v.div_euclid(1000)),
                TimeUnit::Nanosecond => c
                    .as_primitive::<TimestampNanosecondType>()
                    .unary(|v| v.div_euclid(1_000_000)),
            };
            Ok((renamed(DataType::Int64), Arc::new(millis) as ArrayRef))
        }
        DataType::Struct(children) => {
            let s = column.as_struct();
            let mut fields = Vec::with_capacity(children.len());
            let mut columns = Vec::with_capacity(children.len());
            for (f, c) in children.iter().zip(s.columns()) {
                let (f, c) = as_millis(f, c)?;
                fields.push(f);
                columns.push(c);
            }
            let fields = Fields::from(fields);
            let out =
                StructArray::try_new(fields.clone(), columns, s.nulls().cloned()).map_err(fail)?;
            Ok((renamed(DataType::Struct(fields)), Arc::new(out) as ArrayRef))
        }
        DataType::List(item) => {
            let l = column.as_list::<i32>();
            let (item, values) = as_millis(item, l.values())?;
            let out = ListArray::try_new(
                item.clone(),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )
            .map_err(fail)?;
            Ok((renamed(DataType::List(item)), Arc::new(out) as ArrayRef))
        }
        // A large list of timestamps is written as arrow-json writes it.
        _ => Ok((field.clone(), column.clone())),
    }
}

/// A file sink rooted at one directory.
#[derive(Clone, Debug)]
pub struct FileSink {
    storage: Storage,
}

impl FileSink {
    pub fn open(stores: &Stores, location: &str) -> Result<Self> {
        Ok(FileSink {
            storage: stores.open(location)?,
        })
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Writes one task's part file from one buffer, create-only: the
    /// chunked writer ([`FileSink::begin_part`]) with a single chunk.
    pub async fn write_part(
        &self,
        batch: u64,
        partition: u32,
        rows: u64,
        data: Vec<u8>,
    ) -> Result<SinkFile> {
        let name = part_name("", batch, partition, 0, "jsonl");
        let mut writer = self.begin_part(&name).await?;
        writer.write(Bytes::from(data)).await?;
        self.finish_part(writer, &name, rows).await
    }

    /// Removes the temporary files that failed, cancelled or killed
    /// attempts left behind: those of batches up to `upto`, or all of them
    /// when `upto` is `None` (the query has ended). Returns how many.
    pub async fn purge_temp(&self, upto: Option<u64>) -> Result<usize> {
        self.storage
            .remove_hidden(move |name| match temp_batch(name) {
                Some(batch) => upto.is_none_or(|u| batch <= u),
                None => false,
            })
            .await
    }

    /// Starts writing the part file `name` (see [`part_name`]) in chunks
    /// (see [`VisibleWriter`]); [`FileSink::finish_part`] makes it visible.
    pub async fn begin_part(&self, name: &str) -> Result<VisibleWriter> {
        self.storage.begin_visible(&Path::from(name)).await
    }

    /// Makes a part file visible, create-only: a file already there with
    /// the same bytes is adopted, with other bytes it is a conflict.
    pub async fn finish_part(
        &self,
        writer: VisibleWriter,
        name: &str,
        rows: u64,
    ) -> Result<SinkFile> {
        let bytes = match writer.finish().await? {
            Visible::New { bytes } | Visible::Identical { bytes } => bytes,
            Visible::Different => {
                return Err(Error::Conflict {
                    path: self.storage.describe(&Path::from(name)),
                });
            }
        };
        Ok(SinkFile {
            path: name.to_string(),
            rows,
            bytes,
        })
    }

    /// Checks that every file in `files` exists with the size its writer
    /// reported, all at once. A missing or different file is
    /// [`Error::Corrupt`], naming it: a manifest never lists a file that
    /// readers would not find as described.
    pub async fn check_files(&self, files: &[SinkFile]) -> Result<()> {
        let checks = files.iter().map(|f| async move {
            let path = Path::from(f.path.as_str());
            let found = self.storage.size(&path).await?;
            if found == Some(f.bytes) {
                return Ok(());
            }
            Err(Error::Corrupt {
                path: self.storage.describe(&path),
                reason: match found {
                    None => format!("reported written ({} bytes) but missing", f.bytes),
                    Some(n) => format!("reported as {} bytes but has {n}", f.bytes),
                },
            })
        });
        futures::future::try_join_all(checks).await.map(|_| ())
    }

    /// Writes the manifest of a batch, or adopts the one already there.
    pub async fn write_manifest(&self, manifest: &SinkManifest) -> Result<SinkManifest> {
        let path = Path::from_iter([MANIFEST_DIR, &padded(manifest.batch_id)]);
        match self.storage.create(&path, encode(manifest)?).await? {
            Created::New => Ok(manifest.clone()),
            Created::Existing(b) => serde_json::from_slice(&b).map_err(|e| Error::Corrupt {
                path: self.storage.describe(&path),
                reason: e.to_string(),
            }),
        }
    }

    /// Every manifest in batch order.
    pub async fn manifests(&self) -> Result<Vec<SinkManifest>> {
        let mut out = Vec::new();
        for meta in self.storage.list_files(&Path::from(MANIFEST_DIR)).await? {
            let b = self.storage.get(&meta.location).await?.unwrap_or_default();
            out.push(serde_json::from_slice(&b).map_err(|e| Error::Corrupt {
                path: self.storage.describe(&meta.location),
                reason: e.to_string(),
            })?);
        }
        Ok(out)
    }

    /// A sink manifest for `batch` listing `files`, with `version` set.
    pub fn manifest(batch: u64, epoch: u64, mut files: Vec<SinkFile>) -> SinkManifest {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        SinkManifest {
            version: RECORD_VERSION,
            batch_id: batch,
            epoch,
            files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn part_files_are_create_only_and_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let rows = crate::rate::generate(0, 2, 10, 0, 0, 10).unwrap();
        let data = encode_jsonl(&rows).unwrap();
        let text = String::from_utf8(data.clone()).unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            r#"{"value":0,"timestamp_ms":0}"#
        );
        let f = sink.write_part(3, 0, 5, data.clone()).await.unwrap();
        assert_eq!(f.path, "part-00000000000000000003-00000.jsonl");
        // An identical retry is adopted; different bytes are refused.
        sink.write_part(3, 0, 5, data).await.unwrap();
        let err = sink
            .write_part(3, 0, 1, b"{}\n".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }));
    }

    #[test]
    fn timestamps_inside_structs_and_lists_are_milliseconds_too() {
        use arrow_array::types::TimestampSecondType;
        use arrow_array::{Array, ArrayRef, ListArray, StructArray, TimestampSecondArray};
        use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
        use std::sync::Arc;
        let ts = DataType::Timestamp(TimeUnit::Second, None);
        let fields = Fields::from(vec![
            Field::new("start", ts.clone(), true),
            Field::new("end", ts.clone(), true),
        ]);
        let w = StructArray::try_new(
            fields.clone(),
            vec![
                Arc::new(TimestampSecondArray::from(vec![10])) as ArrayRef,
                Arc::new(TimestampSecondArray::from(vec![20])),
            ],
            None,
        )
        .unwrap();
        let l = ListArray::from_iter_primitive::<TimestampSecondType, _, _>(vec![Some(vec![
            Some(1),
            Some(2),
        ])]);
        let schema = Schema::new(vec![
            Field::new("w", DataType::Struct(fields), true),
            Field::new("l", l.data_type().clone(), true),
        ]);
        let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(w), Arc::new(l)]).unwrap();
        let text = String::from_utf8(encode_jsonl(&[b]).unwrap()).unwrap();
        assert_eq!(
            text.trim(),
            r#"{"w":{"start":10000,"end":20000},"l":[1000,2000]}"#
        );
    }

    #[tokio::test]
    async fn temporary_files_of_finished_batches_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let names = [
            ".part-00000000000000000003-00001.jsonl.0a1b.tmp",
            ".part-00000000000000000004-00000.jsonl.0a1c.tmp#1",
            ".part-00000000000000000009-00000.jsonl.0a1d.tmp",
            ".keep-me",
            "part-00000000000000000003-00001.jsonl",
        ];
        for n in names {
            std::fs::write(dir.path().join(n), "x").unwrap();
        }
        assert_eq!(temp_batch(names[1]), Some(4));
        assert_eq!(temp_batch(names[3]), None);
        assert_eq!(sink.purge_temp(Some(4)).await.unwrap(), 2);
        assert_eq!(sink.purge_temp(None).await.unwrap(), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".keep-me", "part-00000000000000000003-00001.jsonl"]);
    }

    #[tokio::test]
    async fn reported_files_are_checked_against_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let f = sink.write_part(1, 0, 1, b"{}\n".to_vec()).await.unwrap();
        sink.check_files(std::slice::from_ref(&f)).await.unwrap();
        let wrong = SinkFile {
            bytes: 9,
            ..f.clone()
        };
        let err = sink.check_files(&[f.clone(), wrong]).await.unwrap_err();
        assert!(
            err.to_string().contains("reported as 9 bytes but has 3"),
            "{err}"
        );
        let gone = SinkFile {
            path: "part-x.jsonl".into(),
            ..f
        };
        let err = sink.check_files(&[gone]).await.unwrap_err();
        assert!(err.to_string().contains("part-x.jsonl"), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
