//! The rate source's planner. A batch covers the global values
//! `[start_value, end_value)`; partition `p` of `P` reads the values `v`
//! with `v % P == p`. A task reads consecutive partitions: small ones are
//! packed together ([`rate::task_groups`]). The source's start time is
//! fixed in `sources/rate` when the query is created, so a replay
//! generates the same rows.

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{OffsetRecord, RateSourceMeta, Record, SourceOffsets};
use sluice_common::rate;
use sluice_common::spec::RateSpec;
use sluice_common::time::now_ms;
use sluice_proto as pb;

use super::{Limits, Next, SourcePlanner};
use crate::error::DriverError;
use crate::planner::{PlanDecision, PlanInput, plan};
use crate::query::ctx::Ctx;

pub struct RatePlanner {
    spec: RateSpec,
    start_ms: i64,
}

impl RatePlanner {
    pub async fn open(ctx: &Ctx, spec: RateSpec) -> Result<Self, DriverError> {
        let meta: RateSourceMeta = ctx
            .storage("read sources/rate", || ctx.qc.require(Record::RateStart))
            .await?;
        Ok(RatePlanner {
            spec,
            start_ms: meta.start_ms,
        })
    }

    /// The first value after `committed`.
    fn committed_end(committed: Option<&SourceOffsets>) -> u64 {
        committed.map_or(0, SourceOffsets::end_value)
    }
}

impl SourcePlanner for RatePlanner {
    fn schema(&self) -> SchemaRef {
        rate::schema()
    }

    fn next<'a>(
        &'a self,
        _ctx: &'a Ctx,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>> {
        Box::pin(async move {
            let committed_end = Self::committed_end(committed);
            let now = now_ms();
            let rps = self.spec.rows_per_second;
            let input = PlanInput {
                committed_end,
                available: rate::available_rows(self.start_ms, now, rps, self.spec.total_rows),
                max_rows_per_batch: limits.max_rows_per_batch,
                total_rows: self.spec.total_rows,
                max_rows_per_task: limits.max_rows_per_task,
                partitions: self.spec.partitions,
            };
            Ok(match plan(input) {
                PlanDecision::Finished => Next::Finished,
                PlanDecision::Wait => {
                    let due = rate::timestamp_ms(self.start_ms, committed_end, rps);
                    Next::Wait(Duration::from_millis((due - now).clamp(1, 1000) as u64))
                }
                PlanDecision::Batch { start, end } => Next::Batch(SourceOffsets::Rate {
                    start_value: start,
                    end_value: end,
                }),
            })
        })
    }

    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String> {
        let end = Self::committed_end(committed);
        match next {
            SourceOffsets::Rate { start_value, .. } => (*start_value != end)
                .then(|| format!("starts at {start_value}, but the previous batch ended at {end}")),
            SourceOffsets::Files { .. } | SourceOffsets::Kafka { .. } => {
                Some("plans another source's input".into())
            }
        }
    }

    fn tasks(&self, plan: &OffsetRecord) -> Vec<(u32, pb::TaskSource)> {
        let SourceOffsets::Rate {
            start_value,
            end_value,
        } = plan.source
        else {
            // Invariant: recovery's `gap` refuses another source's offsets.
            panic!("a rate source was given a file source's offsets");
        };
        let parts = self.spec.partitions;
        rate::task_groups(parts, start_value, end_value, plan.max_rows_per_task)
            .into_iter()
            .map(|(first, count)| {
                let task = pb::RateTask {
                    partitions: parts,
                    rows_per_second: self.spec.rows_per_second,
                    start_ms: self.start_ms,
                    start_value,
                    end_value,
                    partition_count: count,
                };
                let source = pb::TaskSource {
                    kind: Some(pb::task_source::Kind::Rate(task)),
                };
                (first, source)
            })
            .collect()
    }

    fn planned_rows(&self, offsets: &SourceOffsets) -> Option<u64> {
        Some(offsets.end_value() - offsets.start_value())
    }
}
