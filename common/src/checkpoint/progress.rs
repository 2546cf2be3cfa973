//! `progress/<N>`: the progress batch N reported, so that a driver that
//! becomes leader serves the same history as the one before it.
//!
//! ```text
//!  batch N: ... commits/N ─► progress/N ─► published (sluice progress, UI)
//!  new leader: list progress/ ─► read the last PROGRESS_RETAINED ─► history
//! ```
//! Invariant: a record is published only after its `progress/N` is durable,
//! so that what a client saw before a failover is there after it. A driver
//! that stops between `commits/N` and `progress/N` leaves batch N out of the
//! history, and nothing else.

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use super::{Log, QueryCheckpoint};
use crate::error::{Error, Result};

/// Progress records a query keeps: in memory on the leader and on storage.
pub const PROGRESS_RETAINED: usize = 1000;

/// One batch's progress, as stored. The query's id and name are the
/// checkpoint's own, and are not repeated here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressRecord {
    pub version: u32,
    /// The query's name (absent in records written before it was kept):
    /// with `batch_id`, where the record belongs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    pub batch_id: u64,
    pub epoch: u64,
    pub num_input_rows: u64,
    pub input_rows_per_second: f64,
    pub processed_rows_per_second: f64,
    pub duration_ms: PhaseDurations,
    pub timestamp_ms: i64,
    #[serde(default)]
    pub bad_records: u64,
    #[serde(default)]
    pub state_rows_total: u64,
    #[serde(default)]
    pub state_bytes: u64,
    /// A query with `state_ttl_ms`: the state keys that expired in the
    /// batch (absent when none did, and in records before it was kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub state_expired: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_ms: Option<i64>,
    #[serde(default)]
    pub rows_dropped_by_watermark: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_lost: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionProgress>,
    /// Rows written to the sink, and their bytes.
    #[serde(default)]
    pub num_output_rows: u64,
    #[serde(default)]
    pub sink_bytes: u64,
    /// A Kafka sink with exactly_once: the batch's transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_transactions: Option<KafkaTransactions>,
    /// A stateful query: each state operator's state after the batch, in
    /// the order the operators run (absent in records written before it
    /// was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_operators: Vec<OperatorState>,
    /// A join of two streams with an event-time bound: the batch's input
    /// rows whose bound time was NULL, emitted padded or dropped, never
    /// held (absent when none was).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rows_without_event_time: u64,
    /// The first batch after a rescale: the state partitions it rebuilt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_rebuild: Option<StateRebuild>,
}

/// The state partitions a batch rebuilt from an earlier state generation
/// (see `pb::StateRebuild`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRebuild {
    pub partitions: u32,
    pub partitions_read: u64,
    pub rows: u64,
    pub duration_ms: u64,
}

impl StateRebuild {
    pub fn from_proto(r: &pb::StateRebuild) -> Self {
        StateRebuild {
            partitions: r.partitions,
            partitions_read: r.partitions_read,
            rows: r.rows,
            duration_ms: r.duration_ms,
        }
    }

    pub fn to_proto(self) -> pb::StateRebuild {
        pb::StateRebuild {
            partitions: self.partitions,
            partitions_read: self.partitions_read,
            rows: self.rows,
            duration_ms: self.duration_ms,
        }
    }
}

/// One state operator's state after a batch (see `pb::OperatorState`):
/// its rows and in-memory bytes, summed over its state partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// Its state directory under `state/`.
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
}

impl OperatorState {
    pub fn from_proto(o: &pb::OperatorState) -> Self {
        OperatorState {
            name: o.name.clone(),
            rows: o.rows,
            bytes: o.bytes,
        }
    }

    pub fn to_proto(&self) -> pb::OperatorState {
        pb::OperatorState {
            name: self.name.clone(),
            rows: self.rows,
            bytes: self.bytes,
        }
    }
}

/// The transactions of one batch into a Kafka sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaTransactions {
    pub committed: u64,
    pub aborted: u64,
    pub longest_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One Kafka topic partition after a batch (see `pb::PartitionProgress`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionProgress {
    pub topic: String,
    pub partition: i32,
    pub start_offset: i64,
    pub end_offset: i64,
    pub latest_offset: i64,
}

impl PartitionProgress {
    fn from_proto(p: &pb::PartitionProgress) -> Self {
        PartitionProgress {
            topic: p.topic.clone(),
            partition: p.partition,
            start_offset: p.start_offset,
            end_offset: p.end_offset,
            latest_offset: p.latest_offset,
        }
    }

    pub fn to_proto(&self) -> pb::PartitionProgress {
        pb::PartitionProgress {
            topic: self.topic.clone(),
            partition: self.partition,
            start_offset: self.start_offset,
            end_offset: self.end_offset,
            latest_offset: self.latest_offset,
            lag: self.latest_offset - self.end_offset,
        }
    }
}

/// Milliseconds each phase of a batch took (see `pb::Durations`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseDurations {
    pub latest_offset: u64,
    pub wal_commit: u64,
    pub execution: u64,
    pub sink_commit: u64,
    pub commit: u64,
    pub total: u64,
    #[serde(default)]
    pub map: u64,
    #[serde(default)]
    pub reduce: u64,
}

impl ProgressRecord {
    pub fn from_proto(p: &pb::BatchProgress) -> Self {
        let d = p.duration_ms.unwrap_or_default();
        ProgressRecord {
            version: super::RECORD_VERSION,
            query: Some(p.name.clone()),
            batch_id: p.batch_id,
            epoch: p.epoch,
            num_input_rows: p.num_input_rows,
            input_rows_per_second: p.input_rows_per_second,
            processed_rows_per_second: p.processed_rows_per_second,
            duration_ms: PhaseDurations {
                latest_offset: d.latest_offset,
                wal_commit: d.wal_commit,
                execution: d.execution,
                sink_commit: d.sink_commit,
                commit: d.commit,
                total: d.total,
                map: d.map,
                reduce: d.reduce,
            },
            timestamp_ms: p.timestamp_ms,
            bad_records: p.bad_records,
            state_rows_total: p.state_rows_total,
            state_bytes: p.state_bytes,
            state_expired: p.state_expired,
            watermark_ms: p.watermark_ms,
            rows_dropped_by_watermark: p.rows_dropped_by_watermark,
            records_lost: p.records_lost,
            num_output_rows: p.num_output_rows,
            sink_bytes: p.sink_bytes,
            kafka_transactions: p.kafka_transactions.map(|k| KafkaTransactions {
                committed: k.committed,
                aborted: k.aborted,
                longest_ms: k.longest_ms,
            }),
            partitions: p
                .partitions
                .iter()
                .map(PartitionProgress::from_proto)
                .collect(),
            state_operators: p
                .state_operators
                .iter()
                .map(OperatorState::from_proto)
                .collect(),
            rows_without_event_time: p.rows_without_event_time,
            state_rebuild: p.state_rebuild.as_ref().map(StateRebuild::from_proto),
        }
    }

    /// The record as the query `id` (`name`) publishes it.
    pub fn to_proto(&self, id: &str, name: &str) -> pb::BatchProgress {
        let d = self.duration_ms;
        pb::BatchProgress {
            id: id.to_string(),
            name: name.to_string(),
            batch_id: self.batch_id,
            num_input_rows: self.num_input_rows,
            input_rows_per_second: self.input_rows_per_second,
            processed_rows_per_second: self.processed_rows_per_second,
            duration_ms: Some(pb::Durations {
                latest_offset: d.latest_offset,
                wal_commit: d.wal_commit,
                execution: d.execution,
                sink_commit: d.sink_commit,
                commit: d.commit,
                total: d.total,
                map: d.map,
                reduce: d.reduce,
            }),
            timestamp_ms: self.timestamp_ms,
            epoch: self.epoch,
            skipped_before: 0,
            bad_records: self.bad_records,
            state_rows_total: self.state_rows_total,
            state_bytes: self.state_bytes,
            state_expired: self.state_expired,
            watermark_ms: self.watermark_ms,
            rows_dropped_by_watermark: self.rows_dropped_by_watermark,
            records_lost: self.records_lost,
            num_output_rows: self.num_output_rows,
            sink_bytes: self.sink_bytes,
            kafka_transactions: self.kafka_transactions.map(|k| pb::KafkaTransactions {
                committed: k.committed,
                aborted: k.aborted,
                longest_ms: k.longest_ms,
            }),
            partitions: self
                .partitions
                .iter()
                .map(PartitionProgress::to_proto)
                .collect(),
            state_operators: self
                .state_operators
                .iter()
                .map(OperatorState::to_proto)
                .collect(),
            rows_without_event_time: self.rows_without_event_time,
            state_rebuild: self.state_rebuild.map(StateRebuild::to_proto),
        }
    }
}

/// What [`QueryCheckpoint::recent_progress`] found.
#[derive(Debug, Default)]
pub struct RecentProgress {
    pub records: Vec<ProgressRecord>,
    pub damaged: Vec<Error>,
}

impl QueryCheckpoint {
    /// Stores batch `record.batch_id`'s progress; a record already there
    /// (the same batch, reported by a driver before this one) stays.
    pub async fn write_progress(&self, record: &ProgressRecord) -> Result<()> {
        self.create_entry(Log::Progress, record.batch_id, record)
            .await
            .map(|_| ())
    }

    /// The progress of the last `limit` batches that stored one, oldest
    /// first, and the damaged records among them (each names its file). A
    /// storage error fails the call.
    pub async fn recent_progress(&self, limit: usize) -> Result<RecentProgress> {
        use futures::StreamExt;
        let ids = self.batches(Log::Progress).await?;
        let from = ids.len().saturating_sub(limit);
        let reads = ids.into_iter().skip(from).map(|n| {
            let qc = self.clone();
            async move {
                let record = qc.entry::<ProgressRecord>(Log::Progress, n).await?;
                match record {
                    Some(r) => qc.check_progress_identity(n, r).map(Some),
                    None => Ok(None),
                }
            }
        });
        let mut reads = futures::stream::iter(reads).buffered(16);
        let mut recent = RecentProgress::default();
        while let Some(read) = reads.next().await {
            match read {
                Ok(Some(record)) => recent.records.push(record),
                // Purged between the listing and the read: older than
                // what is kept.
                Ok(None) => {}
                Err(e @ Error::Corrupt { .. }) => recent.damaged.push(e),
                Err(e) => return Err(e),
            }
        }
        Ok(recent)
    }

    /// A progress record read from `progress/N`, if it is that query's
    /// record of batch N: one copied from another batch or query is
    /// damage, left out of the history.
    fn check_progress_identity(&self, n: u64, record: ProgressRecord) -> Result<ProgressRecord> {
        let name = self.name();
        let elsewhere = record.query.as_deref().is_some_and(|q| q != name);
        if record.batch_id != n || elsewhere {
            return Err(Error::Corrupt {
                path: self.describe_entry(Log::Progress, n),
                reason: format!(
                    "holds the progress of query {:?}, batch {}, not of query {name:?}, batch {n}",
                    record.query.as_deref().unwrap_or(name),
                    record.batch_id
                ),
            });
        }
        Ok(record)
    }

    /// Deletes `progress/N` for every N below `keep_from`.
    pub async fn purge_progress_before(&self, keep_from: u64) -> Result<usize> {
        self.purge_log_before(Log::Progress, keep_from).await
    }
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
