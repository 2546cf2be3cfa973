//! The Kafka source's planner: asks the brokers where each partition
//! stands, plans the batch's offset ranges ([`plan`]), and cuts them into
//! tasks.
//!
//! ```text
//!  submit: connect ─► topics exist? ─► resolve starting_offsets ─► sources/kafka
//!  batch:  list topics ─► earliest, latest of each partition ─► plan() ─► offsets/N
//!                                                                  │
//!                                      tasks: one per partition range (split at --max-rows-per-task)
//! ```
//!
//! Invariant: the checkpoint is the only record of what was read. The
//! starting offsets are resolved once, at submit (`sources/kafka`), so a
//! driver that takes over before the first batch starts at the same place;
//! after the first batch every partition starts where `offsets/N-1` ended.

mod brokers;
mod plan;

use std::collections::BTreeMap;
use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::TryFutureExt;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{
    KafkaRange, KafkaStart, KafkaStartRecord, OffsetRecord, PartitionProgress, QueryCheckpoint,
    RECORD_VERSION, Record, SourceOffsets,
};
use sluice_common::secrets::Secrets;
use sluice_common::spec::{EARLIEST, Isolation, KafkaSourceSpec, LATEST, OnBadRecord};
use sluice_common::storage::Stores;
use sluice_kafka::Kafka;
use sluice_proto as pb;

use super::io::SourceIo;
use super::{Limits, Next, SourcePlanner, SourceProgress};
use crate::error::DriverError;
use brokers::Brokers;
use plan::{PlanInput, Planned};

/// How long to wait before asking the brokers again when no partition
/// has new records.
const POLL: Duration = Duration::from_millis(100);

/// The deadline of each call to the brokers.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// The deadline of each call at submit, which answers a client waiting:
/// a broker that does not answer within it is reported, not waited for.
const SUBMIT_DEADLINE: Duration = Duration::from_secs(2);

pub struct KafkaPlanner {
    spec: KafkaSourceSpec,
    schema: SchemaRef,
    brokers: Brokers,
    initial: BTreeMap<(String, i32), i64>,
}

/// The Kafka source's registration (see [`super::SourceKind`]): its
/// starting offsets are resolved at submit and fixed in `sources/kafka`.
/// The second field is the spec field of the source (`source`,
/// `sources.<table>`).
pub(super) struct Kind<'s>(pub &'s KafkaSourceSpec, pub String);

impl super::SourceKind for Kind<'_> {
    fn resolve_schema<'a>(
        &'a self,
        _stores: &'a Stores,
    ) -> BoxFuture<'a, Result<SchemaRef, DriverError>> {
        Box::pin(async { Ok(self.0.schema()?) })
    }

    fn create<'a>(
        &'a self,
        qc: &'a QueryCheckpoint,
        _schema: &'a SchemaRef,
        secrets: &'a Secrets,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(create(qc, self.0, &self.1, secrets, epoch))
    }

    fn open<'a>(
        &'a self,
        io: &'a SourceIo,
    ) -> BoxFuture<'a, Result<Box<dyn SourcePlanner>, DriverError>> {
        Box::pin(async move {
            let planner: Box<dyn SourcePlanner> =
                Box::new(KafkaPlanner::open(io, self.0.clone()).await?);
            Ok(planner)
        })
    }
}

impl KafkaPlanner {
    pub async fn open(io: &SourceIo, spec: KafkaSourceSpec) -> Result<Self, DriverError> {
        let schema = spec.schema()?;
        let record: KafkaStartRecord = io
            .storage("read sources/kafka", || {
                io.checkpoint().require(Record::KafkaStart)
            })
            .await?;
        let initial = record
            .partitions
            .into_iter()
            .map(|s| ((s.topic, s.partition), s.offset))
            .collect();
        let (servers, security) = (&spec.bootstrap_servers, &spec.security);
        let field = format!("{}.kafka.security", io.field());
        let kafka = io
            .storage("connect to kafka", || {
                Kafka::connect_secure(servers, security, io.secrets(), &field, DEADLINE).err_into()
            })
            .await?;
        let read_committed = spec.isolation == Isolation::ReadCommitted;
        Ok(KafkaPlanner {
            spec,
            schema,
            brokers: Brokers::new(kafka, read_committed),
            initial,
        })
    }
}

impl SourcePlanner for KafkaPlanner {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next<'a>(
        &'a self,
        io: &'a SourceIo,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>> {
        Box::pin(async move {
            let topics = self.spec.topics();
            let observed = match io
                .storage("ask kafka for offsets", || self.brokers.observe(&topics))
                .await?
            {
                Ok(o) => o,
                Err(m) => {
                    let missing = format!(
                        "topic {:?} does not exist at {}",
                        m.topic,
                        self.brokers.servers()
                    );
                    if self.spec.fail_on_data_loss {
                        return Err(sluice_common::Error::DataLoss(format!(
                            "{missing}, and the query reads it"
                        ))
                        .into());
                    }
                    io.report(format!("{missing}; waiting for it"));
                    return Ok(Next::Wait(Duration::from_secs(1)));
                }
            };
            let committed = match committed {
                Some(SourceOffsets::Kafka { partitions }) => Some(partitions.as_slice()),
                Some(_) => {
                    return Err(DriverError::Internal(
                        "a kafka source was given another source's offsets".into(),
                    ));
                }
                None => None,
            };
            let input = PlanInput {
                observed: &observed,
                committed,
                initial: &self.initial,
                max_records_per_partition: self.spec.max_records_per_partition,
                max_rows_per_batch: limits.max_rows_per_batch,
                fail_on_data_loss: self.spec.fail_on_data_loss,
            };
            match plan::plan(&input) {
                Planned::Batch(partitions) => Ok(Next::Batch(SourceOffsets::Kafka { partitions })),
                Planned::Nothing => Ok(Next::Wait(POLL)),
                Planned::DataLoss(why) => Err(sluice_common::Error::DataLoss(why).into()),
            }
        })
    }

    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String> {
        let SourceOffsets::Kafka { partitions } = next else {
            return Some("plans another source's input".into());
        };
        let before: BTreeMap<(&str, i32), i64> = match committed {
            Some(SourceOffsets::Kafka { partitions }) => partitions
                .iter()
                .map(|r| ((r.topic.as_str(), r.partition), r.end))
                .collect(),
            Some(_) => return Some("follows another source's input".into()),
            None => BTreeMap::new(),
        };
        partitions.iter().find_map(|r| {
            let end = *before.get(&(r.topic.as_str(), r.partition))?;
            let from = r.previous_end.unwrap_or(r.start);
            (from != end).then(|| {
                format!(
                    "topic {:?} partition {} starts at offset {}, but the previous batch ended at {end}",
                    r.topic, r.partition, r.start
                )
            })
        })
    }

    fn tasks(
        &self,
        plan: &OffsetRecord,
        input: &SourceOffsets,
    ) -> Result<Vec<(u32, pb::TaskSource)>, DriverError> {
        let SourceOffsets::Kafka { partitions } = input else {
            return Err(super::other_source("kafka", plan, input));
        };
        let per_task = plan.max_rows_per_task.unwrap_or(u64::MAX).max(1);
        let mut pieces: Vec<(&KafkaRange, i64, i64)> = Vec::new();
        for r in partitions {
            let mut at = r.start;
            while at < r.end {
                let to = r
                    .end
                    .min(at.saturating_add(i64::try_from(per_task).unwrap_or(i64::MAX)));
                pieces.push((r, at, to));
                at = to;
            }
        }
        if pieces.is_empty() {
            // A batch that only records skipped offsets still runs one
            // (empty) task, so that it commits like any other.
            let r = partitions
                .first()
                .expect("a kafka plan lists its partitions");
            pieces.push((r, r.start, r.start));
        }
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, (r, start, end))| {
                let task = pb::KafkaTask {
                    bootstrap_servers: self.spec.bootstrap_servers.clone(),
                    topic: r.topic.clone(),
                    partition: r.partition,
                    start,
                    end,
                    format: self.spec.format().as_str().to_string(),
                    skip_bad_records: self.spec.on_bad_record == OnBadRecord::Skip,
                    fail_on_data_loss: self.spec.fail_on_data_loss,
                    security: (!self.spec.security.is_plaintext())
                        .then(|| (&self.spec.security).into()),
                    read_uncommitted: self.spec.isolation == Isolation::ReadUncommitted,
                };
                let source = pb::TaskSource {
                    kind: Some(pb::task_source::Kind::Kafka(task)),
                    table: String::new(),
                };
                Ok((i as u32, source))
            })
            .collect()
    }

    fn planned_rows(&self, _offsets: &SourceOffsets) -> Option<u64> {
        // Offsets may have holes (compaction, transaction markers).
        None
    }

    /// Every partition of `committed`, read no further; none before the
    /// first batch (a partition a batch does not list starts where
    /// `sources/kafka` says).
    fn idle(&self, committed: Option<&SourceOffsets>) -> SourceOffsets {
        let partitions = match committed {
            Some(SourceOffsets::Kafka { partitions }) => partitions
                .iter()
                .map(|r| KafkaRange {
                    start: r.end,
                    previous_end: None,
                    ..r.clone()
                })
                .collect(),
            _ => Vec::new(),
        };
        SourceOffsets::Kafka { partitions }
    }

    fn progress(&self, offsets: &SourceOffsets) -> SourceProgress {
        let SourceOffsets::Kafka { partitions } = offsets else {
            return SourceProgress::default();
        };
        SourceProgress {
            records_lost: partitions.iter().map(KafkaRange::lost).sum(),
            partitions: partitions
                .iter()
                .map(|r| PartitionProgress {
                    topic: r.topic.clone(),
                    partition: r.partition,
                    start_offset: r.start,
                    end_offset: r.end,
                    latest_offset: r.latest,
                })
                .collect(),
        }
    }
}

/// Checks a new query's source against the brokers and writes where it
/// starts (`sources/kafka`). Errors name the spec field: a broker that
/// cannot be reached, a topic that does not exist, a starting offset
/// outside its partition.
pub async fn create(
    qc: &QueryCheckpoint,
    spec: &KafkaSourceSpec,
    source_field: &str,
    secrets: &Secrets,
    epoch: u64,
) -> Result<(), DriverError> {
    let field = format!("{source_field}.kafka");
    let invalid = |f: &str, r: String| DriverError::Invalid(format!("{field}.{f}: {r}"));
    let security = format!("{field}.security");
    let kafka = Kafka::connect_secure(
        &spec.bootstrap_servers,
        &spec.security,
        secrets,
        &security,
        SUBMIT_DEADLINE,
    )
    .await
    .map_err(|e| match e {
        // A setting at fault names its own field.
        sluice_kafka::Error::Common(sluice_common::Error::InvalidSpec { .. }) => {
            DriverError::Invalid(e.to_string())
        }
        e => invalid("bootstrap_servers", e.to_string()),
    })?;
    let topics = spec.topics();
    let read_committed = spec.isolation == Isolation::ReadCommitted;
    let observed = match Brokers::new(kafka, read_committed).observe(&topics).await {
        Ok(Ok(o)) => o,
        Ok(Err(m)) => {
            let f = match spec.topic {
                Some(_) => "topic".to_string(),
                None => format!("topics[{}]", m.index),
            };
            let known = if m.known.is_empty() {
                "none".to_string()
            } else {
                m.known.join(", ")
            };
            return Err(invalid(
                &f,
                format!(
                    "topic {:?} does not exist at {} (topics there: {known})",
                    m.topic, spec.bootstrap_servers
                ),
            ));
        }
        Err(e) => return Err(invalid("bootstrap_servers", e.to_string())),
    };
    let mut partitions = Vec::with_capacity(observed.len());
    for o in observed {
        let (topic, p) = (&o.topic, o.partition);
        let Some(named) = spec.starting_offsets.named(topic, p) else {
            return Err(invalid(
                "starting_offsets",
                format!(
                    "does not name partition {p} of topic {topic:?}; \
                     name every partition (-2: earliest, -1: latest)"
                ),
            ));
        };
        let (earliest, latest) = (o.earliest, o.latest);
        let offset = match named {
            EARLIEST => earliest,
            LATEST => latest,
            o if (earliest..=latest).contains(&o) => o,
            o => {
                return Err(invalid(
                    "starting_offsets",
                    format!(
                        "offset {o} of topic {topic:?} partition {p} is outside its records, {earliest}..{latest}"
                    ),
                ));
            }
        };
        partitions.push(KafkaStart {
            topic: o.topic,
            partition: p,
            offset,
        });
    }
    let record = KafkaStartRecord {
        version: RECORD_VERSION,
        epoch,
        partitions,
    };
    // Create-only: a retried submit keeps the offsets the first one found.
    qc.create(Record::KafkaStart, &record).await?;
    Ok(())
}
