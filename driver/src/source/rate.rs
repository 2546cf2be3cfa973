//! The rate source's planner. A batch covers the global values
//! `[start_value, end_value)`; partition `p` of `P` reads the values `v`
//! with `v % P == p`. A task reads consecutive partitions: small ones are
//! packed together ([`rate::task_groups`]). The source's start time is
//! fixed in `sources/rate` when the query is created, so a replay
//! generates the same rows.

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{
    OffsetRecord, QueryCheckpoint, RECORD_VERSION, RateSourceMeta, Record, SourceOffsets,
};
use sluice_common::rate;
use sluice_common::secrets::Secrets;
use sluice_common::spec::RateSpec;
use sluice_common::storage::Stores;
use sluice_common::time::now_ms;
use sluice_proto as pb;

use super::io::SourceIo;
use super::{Limits, Next, SourcePlanner};
use crate::error::DriverError;
use crate::planner::{PlanDecision, PlanInput, plan};

pub struct RatePlanner {
    spec: RateSpec,
    start_ms: i64,
}

/// The rate source's registration (see [`super::SourceKind`]).
pub(super) struct Kind<'s>(pub &'s RateSpec);

impl super::SourceKind for Kind<'_> {
    fn resolve_schema<'a>(
        &'a self,
        _stores: &'a Stores,
    ) -> BoxFuture<'a, Result<SchemaRef, DriverError>> {
        Box::pin(async { Ok(rate::schema()) })
    }

    fn create<'a>(
        &'a self,
        qc: &'a QueryCheckpoint,
        _schema: &'a SchemaRef,
        _secrets: &'a Secrets,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(create_start(qc, Record::RateStart, epoch))
    }

    fn open<'a>(
        &'a self,
        io: &'a SourceIo,
    ) -> BoxFuture<'a, Result<Box<dyn SourcePlanner>, DriverError>> {
        Box::pin(async move {
            let planner: Box<dyn SourcePlanner> =
                Box::new(RatePlanner::open(io, self.0.clone()).await?);
            Ok(planner)
        })
    }
}

impl RatePlanner {
    pub async fn open(io: &SourceIo, spec: RateSpec) -> Result<Self, DriverError> {
        Ok(RatePlanner {
            spec,
            start_ms: read_start(io, Record::RateStart).await?,
        })
    }

    /// The first value after `committed`.
    fn committed_end(committed: Option<&SourceOffsets>) -> u64 {
        committed.map_or(0, SourceOffsets::end_value)
    }
}

/// Fixes a generated source's start at `record` (create-only: a retried
/// submit adopts the start already there).
pub(super) async fn create_start(
    qc: &QueryCheckpoint,
    record: Record,
    epoch: u64,
) -> Result<(), DriverError> {
    let start = RateSourceMeta {
        version: RECORD_VERSION,
        start_ms: now_ms(),
        epoch,
    };
    qc.create(record, &start).await?;
    Ok(())
}

/// The tasks of a generated source's values `range` over `parts`
/// partitions, packed into runs ([`rate::task_groups`]), each with its
/// first partition; `kind` makes a run's task.
pub(super) fn packed_tasks(
    parts: u32,
    (start, end): (u64, u64),
    plan: &OffsetRecord,
    kind: impl Fn(u32, u32) -> pb::task_source::Kind,
) -> Vec<(u32, pb::TaskSource)> {
    rate::task_groups(parts, start, end, plan.max_rows_per_task)
        .into_iter()
        .map(|(first, count)| {
            let source = pb::TaskSource {
                kind: Some(kind(first, count)),
                table: String::new(),
            };
            (first, source)
        })
        .collect()
}

/// A generated source's start, fixed at `record`.
pub(super) async fn read_start(io: &SourceIo, record: Record) -> Result<i64, DriverError> {
    let meta: RateSourceMeta = io
        .storage(
            &format!("read {}", io.checkpoint().describe(record)),
            || io.checkpoint().require(record),
        )
        .await?;
    Ok(meta.start_ms)
}

/// A generated source's pace: value `v` (of `total`, if bounded) is
/// available `v / per_second` seconds after `start_ms`.
pub(super) struct Paced {
    pub start_ms: i64,
    pub per_second: u64,
    pub total: Option<u64>,
    pub partitions: u32,
}

impl Paced {
    /// The values `[start, end)` of the next batch after `committed_end`,
    /// within the caps, or how long until the next value is due.
    pub fn next(
        &self,
        committed_end: u64,
        max_per_batch: Option<u64>,
        max_per_task: u64,
    ) -> Next<(u64, u64)> {
        let now = now_ms();
        let input = PlanInput {
            committed_end,
            available: rate::available_rows(self.start_ms, now, self.per_second, self.total),
            max_rows_per_batch: max_per_batch,
            total_rows: self.total,
            max_rows_per_task: max_per_task,
            partitions: self.partitions,
        };
        match plan(input) {
            PlanDecision::Finished => Next::Finished,
            PlanDecision::Wait => {
                let due = rate::timestamp_ms(self.start_ms, committed_end, self.per_second);
                Next::Wait(Duration::from_millis((due - now).clamp(1, 1000) as u64))
            }
            PlanDecision::Batch { start, end } => Next::Batch((start, end)),
        }
    }
}

impl SourcePlanner for RatePlanner {
    fn schema(&self) -> SchemaRef {
        rate::schema()
    }

    fn next<'a>(
        &'a self,
        _io: &'a SourceIo,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>> {
        Box::pin(async move {
            let paced = Paced {
                start_ms: self.start_ms,
                per_second: self.spec.rows_per_second,
                total: self.spec.total_rows,
                partitions: self.spec.partitions,
            };
            let next = paced.next(
                Self::committed_end(committed),
                limits.max_rows_per_batch,
                limits.max_rows_per_task,
            );
            Ok(match next {
                Next::Batch((start, end)) => Next::Batch(SourceOffsets::Rate {
                    start_value: start,
                    end_value: end,
                }),
                Next::Wait(d) => Next::Wait(d),
                Next::Finished => Next::Finished,
            })
        })
    }

    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String> {
        let end = Self::committed_end(committed);
        match next {
            SourceOffsets::Rate { start_value, .. } => (*start_value != end)
                .then(|| format!("starts at {start_value}, but the previous batch ended at {end}")),
            _ => Some("plans another source's input".into()),
        }
    }

    fn tasks(
        &self,
        plan: &OffsetRecord,
        input: &SourceOffsets,
    ) -> Result<Vec<(u32, pb::TaskSource)>, DriverError> {
        let SourceOffsets::Rate {
            start_value,
            end_value,
        } = *input
        else {
            return Err(super::other_source("rate", plan, input));
        };
        let parts = self.spec.partitions;
        let range = (start_value, end_value);
        Ok(packed_tasks(parts, range, plan, |first, count| {
            pb::task_source::Kind::Rate(pb::RateTask {
                partitions: parts,
                rows_per_second: self.spec.rows_per_second,
                start_ms: self.start_ms,
                start_value,
                end_value,
                partition_count: count,
                first_partition: first,
            })
        }))
    }

    fn planned_rows(&self, offsets: &SourceOffsets) -> Option<u64> {
        Some(offsets.end_value() - offsets.start_value())
    }

    fn idle(&self, committed: Option<&SourceOffsets>) -> SourceOffsets {
        let end = Self::committed_end(committed);
        SourceOffsets::Rate {
            start_value: end,
            end_value: end,
        }
    }
}
