//! The checkpoint of each query, on shared storage.
//!
//! Its files, and the state files under it, are drawn in one table:
//! `checkpoint/layout.rs`'s header. Every record carries a `version`
//! field, and every decode error names the file.
//!
//! Only this module spells these paths (`checkpoint/layout.rs`): callers name a file as
//! a [`Record`] or as a [`Log`] entry, through [`QueryCheckpoint`]'s typed
//! readers and writers. A query's state (`state/`, `shuffle/`) is laid out
//! by [`crate::state`], under [`query_location`].

mod layout;
mod offsets;
mod progress;
mod rescale;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::Path;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::QuerySpec;
use crate::storage::{Created, Storage, Stores};
pub use layout::{
    EPOCHS_DIR, INPUTS_DIR, Log, QUERIES_DIR, Record, SHUFFLE_DIR, STATE_DIR, query_location,
};
pub use offsets::{
    FileRange, Inputs, KafkaRange, OffsetRecord, SourceFile, SourceOffsets, TableFile,
};
pub use progress::{
    KafkaTransactions, OperatorState, PROGRESS_RETAINED, PartitionProgress, PhaseDurations,
    ProgressRecord, RecentProgress, StateRebuild,
};
pub use rescale::RescaleRecord;

pub const RECORD_VERSION: u32 = 1;

/// A batch or epoch number as a file name.
pub fn padded(n: u64) -> String {
    format!("{n:020}")
}

/// The number that `name` stands for when it is exactly what [`padded`]
/// writes: 20 ASCII digits, without sign or space (`+0000000000000000001`
/// is not batch 1's file).
pub fn parse_padded(name: &str) -> Option<u64> {
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryMetadata {
    pub version: u32,
    pub id: uuid::Uuid,
    pub name: String,
    pub created_ms: i64,
    /// The epoch of the driver that accepted the submit.
    #[serde(default)]
    pub epoch: u64,
}

/// `sources/files/<N>`: the files batch N of a file source read. This log
/// outlives `offsets/` (which is purged), so no file is ever read twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLogEntry {
    pub version: u32,
    pub batch_id: u64,
    pub files: Vec<String>,
}

/// `sources/tables`: the schema of each static table, fixed when the query
/// was submitted, and where its files are (the directory, and the one file
/// when the table is a file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TablesRecord {
    pub version: u32,
    pub tables: std::collections::BTreeMap<String, TableSchema>,
    pub epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub schema: arrow_schema::Schema,
    pub dir: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// `sources/schema`: the schema of the `input` table, fixed when the query
/// was submitted (declared, or inferred from the files then present).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaRecord {
    pub version: u32,
    pub schema: arrow_schema::Schema,
    pub epoch: u64,
}

/// What a batch committed. Invariant (docs/design-notes.md, 2): written only after the
/// sink manifest of the batch is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRecord {
    pub version: u32,
    pub batch_id: u64,
    pub epoch: u64,
    pub num_rows: u64,
    pub end_value: u64,
    pub committed_ms: i64,
    /// A query with a watermark: the latest event time of every batch up to
    /// this one, from which the next batch's watermark follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_time_ms: Option<i64>,
    /// A query with `sources:`: each watermarked input's latest event time
    /// of every batch up to this one.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub max_event_times: std::collections::BTreeMap<String, i64>,
    /// The input rows of batches 0 to this one. Absent in records written
    /// before it was kept: the source's end position stands in (the same
    /// number for the rate source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_rows_total: Option<u64>,
}

impl CommitRecord {
    /// The input rows of batches 0 to this one.
    pub fn rows_so_far(&self) -> u64 {
        self.input_rows_total.unwrap_or(self.end_value)
    }
}

/// `transactions/N`: the Kafka transactions batch N's tasks prepared (wrote
/// and left open). Invariant (docs/design-notes.md, "Exactly-once into
/// Kafka"): written, create-only, after every task of batch N succeeded and
/// before the driver commits any of them; `commits/N` follows only once
/// every one is committed. A driver that finds it without `commits/N`
/// commits them again; one that finds no record runs batch N again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionsRecord {
    pub version: u32,
    pub batch_id: u64,
    pub epoch: u64,
    pub transactions: Vec<PreparedTransaction>,
    /// What the batch's tasks reported: a driver that commits the
    /// transactions after a restart runs no task of the batch again, and
    /// writes `commits/N` and the batch's progress from this.
    pub outcome: PreparedOutcome,
}

/// A prepared batch's task reports, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedOutcome {
    pub input_rows: u64,
    pub rows: u64,
    pub sink_bytes: u64,
    pub bad_records: u64,
    pub records_lost: u64,
    pub rows_dropped_by_watermark: u64,
    pub state_rows_total: u64,
    pub state_bytes: u64,
    /// The state keys that expired (`state_ttl_ms`; absent when none did).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub state_expired: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_time_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub max_event_times: std::collections::BTreeMap<String, i64>,
    /// The longest any transaction had been open when its task reported.
    pub longest_open_ms: u64,
    /// Failed attempts of the writing tasks, whose transactions their
    /// retries aborted.
    #[serde(default)]
    pub writer_retries: u64,
    /// Each state operator's state (absent in records written before it
    /// was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_operators: Vec<OperatorState>,
    /// A bounded join's input rows whose time was NULL (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rows_without_event_time: u64,
    /// The state partitions the batch rebuilt after a rescale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_rebuild: Option<StateRebuild>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One transaction a task left open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// `sources/kafka`: where a Kafka query starts in each partition, resolved
/// from `starting_offsets` when it was submitted. It is read only while the
/// query has no batch: after that, a batch starts where the last one ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaStartRecord {
    pub version: u32,
    pub epoch: u64,
    pub partitions: Vec<KafkaStart>,
}

/// One partition's starting offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaStart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A generated source's fixed start (`sources/rate`, `sources/nexmark`):
/// the rate source's rows are stamped from it, so that a replay produces
/// the same bytes; both sources pace their rows from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateSourceMeta {
    pub version: u32,
    pub start_ms: i64,
    #[serde(default)]
    pub epoch: u64,
}

/// The stop marker's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRecord {
    pub version: u32,
    pub stopped_ms: i64,
    pub epoch: u64,
}

/// The failure marker's content: why the query FAILED. A FAILED query
/// stays FAILED across driver restarts and failovers until it is
/// resubmitted, which removes the marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRecord {
    pub version: u32,
    pub failed_ms: i64,
    pub epoch: u64,
    pub error: String,
}

/// Encodes a record as pretty JSON.
pub fn encode<T: Serialize>(value: &T) -> Result<Bytes> {
    serde_json::to_vec_pretty(value)
        .map(Bytes::from)
        .map_err(|e| Error::Encoding(e.to_string()))
}

/// The checkpoint root: every query's files and the epoch claims.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    storage: Storage,
    /// Bytes of records written through this root and its queries.
    written: Arc<AtomicU64>,
}

impl Checkpoint {
    /// Checks that the root can be used (see [`Storage::probe`]).
    pub async fn probe(&self) -> Result<()> {
        self.storage.probe().await
    }

    pub fn open(stores: &Stores, location: &str) -> Result<Self> {
        Ok(Checkpoint {
            written: Arc::default(),
            storage: stores.open(location)?,
        })
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The names of every query with a checkpoint directory.
    pub async fn query_names(&self) -> Result<Vec<String>> {
        self.storage.list_dirs(&Path::from(QUERIES_DIR)).await
    }

    /// Bytes of the records this process created through this root.
    pub fn bytes_written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    pub fn query(&self, name: &str) -> QueryCheckpoint {
        QueryCheckpoint {
            written: self.written.clone(),
            storage: self.storage.clone(),
            dir: Path::from_iter([QUERIES_DIR, name]),
            scope: None,
        }
    }
}

/// The files of one query.
#[derive(Clone, Debug)]
pub struct QueryCheckpoint {
    storage: Storage,
    dir: Path,
    written: Arc<AtomicU64>,
    /// The input stream whose source records this view reads and writes
    /// (`None`: the query's one `source:`); see `INPUTS_DIR` in the layout.
    scope: Option<String>,
}

impl QueryCheckpoint {
    /// The view of the query's checkpoint that input stream `input` of a
    /// query with `sources:` sees: its source records are its own.
    pub fn input(&self, input: &str) -> QueryCheckpoint {
        QueryCheckpoint {
            scope: Some(input.to_string()),
            ..self.clone()
        }
    }

    fn rel(&self, record: Record) -> String {
        record.rel_in(self.scope.as_deref())
    }

    fn entry_rel(&self, log: Log, batch: u64) -> String {
        log.entry_in(self.scope.as_deref(), batch)
    }

    fn path(&self, rel: &str) -> Path {
        rel.split('/')
            .fold(self.dir.clone(), |p, part| p.join(part))
    }

    /// The query's name: its directory under `queries/`.
    pub fn name(&self) -> &str {
        self.dir.filename().unwrap_or_default()
    }

    /// Human-readable location of the query's directory, for errors.
    pub fn describe_dir(&self) -> String {
        self.storage.describe(&self.dir)
    }

    /// Human-readable location of `record`, for errors.
    pub fn describe(&self, record: Record) -> String {
        self.storage.describe(&self.path(&self.rel(record)))
    }

    /// Human-readable location of batch `batch`'s entry in `log`.
    pub fn describe_entry(&self, log: Log, batch: u64) -> String {
        self.storage
            .describe(&self.path(&self.entry_rel(log, batch)))
    }

    async fn read_rel<T: DeserializeOwned>(&self, rel: &str) -> Result<Option<T>> {
        let path = self.path(rel);
        match self.storage.get(&path).await? {
            None => Ok(None),
            Some(bytes) => decode(&bytes, &self.storage.describe(&path)).map(Some),
        }
    }

    /// Creates `rel` with `value`, or adopts the record already there.
    /// Returns the record that is now on storage and whether this call wrote it.
    async fn create_rel<T>(&self, rel: &str, value: &T) -> Result<(T, bool)>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        let path = self.path(rel);
        let bytes = encode(value)?;
        let len = bytes.len() as u64;
        match self.storage.create(&path, bytes).await? {
            Created::New => {
                self.written.fetch_add(len, Ordering::Relaxed);
                Ok((value.clone(), true))
            }
            Created::Existing(b) => Ok((decode(&b, &self.storage.describe(&path))?, false)),
        }
    }

    /// `record`, decoded, or `None` when it does not exist.
    pub async fn read<T: DeserializeOwned>(&self, record: Record) -> Result<Option<T>> {
        self.read_rel(&self.rel(record)).await
    }

    /// `record`, decoded; one that does not exist is damage, named.
    pub async fn require<T: DeserializeOwned>(&self, record: Record) -> Result<T> {
        self.read(record).await?.ok_or_else(|| Error::Corrupt {
            path: self.describe(record),
            reason: "missing".into(),
        })
    }

    /// Creates `record` with `value`, or adopts the one already there.
    /// Returns the record that is now on storage and whether this call
    /// wrote it.
    pub async fn create<T>(&self, record: Record, value: &T) -> Result<(T, bool)>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        self.create_rel(&self.rel(record), value).await
    }

    pub async fn exists(&self, record: Record) -> Result<bool> {
        self.storage.exists(&self.path(&self.rel(record))).await
    }

    /// Batch `batch`'s entry in `log`, decoded, or `None`.
    pub async fn entry<T: DeserializeOwned>(&self, log: Log, batch: u64) -> Result<Option<T>> {
        self.read_rel(&self.entry_rel(log, batch)).await
    }

    /// Batch `batch`'s entry in `log`, decoded; one that does not exist is
    /// damage, named.
    pub async fn require_entry<T: DeserializeOwned>(&self, log: Log, batch: u64) -> Result<T> {
        self.entry(log, batch).await?.ok_or_else(|| Error::Corrupt {
            path: self.describe_entry(log, batch),
            reason: "missing".into(),
        })
    }

    /// Creates batch `batch`'s entry in `log`, or adopts the one already
    /// there; as [`QueryCheckpoint::create`].
    pub async fn create_entry<T>(&self, log: Log, batch: u64, value: &T) -> Result<(T, bool)>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        self.create_rel(&self.entry_rel(log, batch), value).await
    }

    /// The failure marker: `Some` while the query is FAILED.
    pub async fn failure(&self) -> Result<Option<FailRecord>> {
        self.read(Record::Failed).await
    }

    /// Writes the failure marker, create-only (a marker already there is
    /// kept).
    pub async fn record_failure(&self, record: &FailRecord) -> Result<()> {
        self.create(Record::Failed, record).await.map(|_| ())
    }

    /// Removes the failure marker of a resubmitted query.
    pub async fn clear_failure(&self) -> Result<()> {
        self.storage
            .delete(&self.path(&self.rel(Record::Failed)))
            .await
    }

    pub async fn metadata(&self) -> Result<Option<QueryMetadata>> {
        self.read(Record::Metadata).await
    }

    /// The spec the query runs with: `spec.json` as submitted, with the
    /// state partitions of its latest rescale (see [`RescaleRecord`]).
    pub async fn spec(&self) -> Result<Option<QuerySpec>> {
        let path = self.path(&self.rel(Record::Spec));
        let mut spec = match self.storage.get(&path).await? {
            None => return Ok(None),
            Some(b) => decode_spec(&b, &self.storage.describe(&path))?,
        };
        if let Some(latest) = self.rescales().await?.last() {
            spec.state_partitions = Some(latest.partitions);
        }
        Ok(Some(spec))
    }

    pub async fn offsets(&self, batch: u64) -> Result<Option<OffsetRecord>> {
        self.entry(Log::Offsets, batch).await
    }

    /// Writes `offsets/N` for `record`'s batch, or adopts the plan there.
    pub async fn write_offsets(&self, record: &OffsetRecord) -> Result<(OffsetRecord, bool)> {
        self.create_entry(Log::Offsets, record.batch_id, record)
            .await
    }

    pub async fn commit(&self, batch: u64) -> Result<Option<CommitRecord>> {
        self.entry(Log::Commits, batch).await
    }

    /// Writes `commits/N` for `record`'s batch, or adopts the one there.
    pub async fn write_commit(&self, record: &CommitRecord) -> Result<(CommitRecord, bool)> {
        self.create_entry(Log::Commits, record.batch_id, record)
            .await
    }

    pub async fn transactions(&self, batch: u64) -> Result<Option<TransactionsRecord>> {
        self.entry(Log::Transactions, batch).await
    }

    /// Writes `transactions/N` for `record`'s batch, or returns the one
    /// there (with `false`).
    pub async fn write_transactions(
        &self,
        record: &TransactionsRecord,
    ) -> Result<(TransactionsRecord, bool)> {
        self.create_entry(Log::Transactions, record.batch_id, record)
            .await
    }

    /// The highest batch id in `log`. A name that is not a batch id is
    /// damage, reported by file name.
    pub async fn latest(&self, log: Log) -> Result<Option<u64>> {
        Ok(self.batches(log).await?.last().copied())
    }

    /// Every batch id in `log`, ascending.
    pub async fn batches(&self, log: Log) -> Result<Vec<u64>> {
        let files = self
            .storage
            .list_files(&self.path(&log.dir_in(self.scope.as_deref())))
            .await?;
        let mut ids = Vec::with_capacity(files.len());
        for f in files {
            let name = f.location.filename().unwrap_or_default();
            let n = parse_padded(name).ok_or_else(|| Error::Corrupt {
                path: self.storage.describe(&f.location),
                reason: "not a batch file (expected a 20-digit batch id)".into(),
            })?;
            ids.push(n);
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Deletes `offsets/N`, `commits/N` and `transactions/N` for every N
    /// below `keep_from`. Only committed batches are ever passed here.
    pub async fn purge_before(&self, keep_from: u64) -> Result<usize> {
        let mut removed = 0;
        for log in [Log::Transactions, Log::Commits, Log::Offsets] {
            removed += self.purge_log_before(log, keep_from).await?;
        }
        Ok(removed)
    }

    async fn purge_log_before(&self, log: Log, keep_from: u64) -> Result<usize> {
        let mut removed = 0;
        for n in self.batches(log).await? {
            if n >= keep_from {
                break;
            }
            self.storage
                .delete(&self.path(&self.entry_rel(log, n)))
                .await?;
            removed += 1;
        }
        Ok(removed)
    }
}

/// Decodes the record stored at `path`. An error names the file, the field
/// at fault when there is one, and the line and column.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], path: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        // Only a record that fails pays for tracking the field: decoding
        // it again, alike, yields the path to the same error.
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let field = serde_path_to_error::deserialize::<_, T>(&mut de)
            .err()
            .map(|e| e.path().to_string())
            .filter(|f| f != ".");
        // An error about the record as a whole (one of its shapes is
        // missing) has no position of its own: it was found where the
        // record ends.
        let e = match e.line() {
            0 => format!("{e} at {}", end_of(bytes)),
            _ => e.to_string(),
        };
        Error::Corrupt {
            path: path.to_string(),
            reason: match field {
                Some(f) => format!("field `{f}`: {e}"),
                None => e,
            },
        }
    })
}

/// Where `bytes` end, as `line L column C`.
fn end_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    let line = text.matches('\n').count() + 1;
    let column = text.rsplit('\n').next().map_or(0, |l| l.chars().count());
    format!("line {line} column {column}")
}

/// Decodes and validates the spec stored at `path` (`spec.json`).
pub fn decode_spec(bytes: &[u8], path: &str) -> Result<QuerySpec> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_string(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| corrupt(format!("not UTF-8: {e}")))?;
    QuerySpec::parse(text).map_err(|e| corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn logs_list_in_numeric_order_and_name_damage() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let q = cp.query("q");
        for n in [10u64, 2, 1] {
            let rec = CommitRecord {
                version: 1,
                batch_id: n,
                epoch: 1,
                num_rows: 1,
                end_value: n,
                committed_ms: 0,
                max_event_time_ms: None,
                max_event_times: Default::default(),
                input_rows_total: Some(n),
            };
            q.write_commit(&rec).await.unwrap();
        }
        assert_eq!(q.batches(Log::Commits).await.unwrap(), vec![1, 2, 10]);
        assert_eq!(q.latest(Log::Offsets).await.unwrap(), None);
        std::fs::write(
            dir.path()
                .join(QUERIES_DIR)
                .join("q")
                .join(Log::Commits.entry(11)),
            b"{trunc",
        )
        .unwrap();
        let err = q.commit(11).await.unwrap_err().to_string();
        assert!(err.contains("00000000000000000011"), "{err}");
        assert_eq!(cp.query_names().await.unwrap(), vec!["q".to_string()]);
    }
}
