//! The Nexmark source's planner. A batch covers the events `[start_event,
//! end_event)` of the generated stream, of all kinds; its tasks read the
//! table's rows among them, partition `p` of `P` the rows `r` with
//! `r % P == p`, small partitions packed as the rate source packs them.
//! Events are paced from the start fixed in `sources/nexmark` when the
//! query is created: event `n` is available `n / events_per_second`
//! seconds after it. What the rows are is `sluice_common::nexmark`'s.

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{OffsetRecord, QueryCheckpoint, Record, SourceOffsets};
use sluice_common::nexmark;
use sluice_common::secrets::Secrets;
use sluice_common::spec::NexmarkSpec;
use sluice_common::storage::Stores;
use sluice_proto as pb;

use super::io::SourceIo;
use super::rate::{Paced, create_start, packed_tasks, read_start};
use super::{Limits, Next, SourcePlanner};
use crate::error::DriverError;

pub struct NexmarkPlanner {
    spec: NexmarkSpec,
    start_ms: i64,
}

/// The Nexmark source's registration (see [`super::SourceKind`]).
pub(super) struct Kind<'s>(pub &'s NexmarkSpec);

impl super::SourceKind for Kind<'_> {
    fn resolve_schema<'a>(
        &'a self,
        _stores: &'a Stores,
    ) -> BoxFuture<'a, Result<SchemaRef, DriverError>> {
        Box::pin(async { Ok(nexmark::schema(self.0.table)) })
    }

    fn create<'a>(
        &'a self,
        qc: &'a QueryCheckpoint,
        _schema: &'a SchemaRef,
        _secrets: &'a Secrets,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(create_start(qc, Record::NexmarkStart, epoch))
    }

    fn open<'a>(
        &'a self,
        io: &'a SourceIo,
    ) -> BoxFuture<'a, Result<Box<dyn SourcePlanner>, DriverError>> {
        Box::pin(async move {
            let planner: Box<dyn SourcePlanner> = Box::new(NexmarkPlanner {
                spec: self.0.clone(),
                start_ms: read_start(io, Record::NexmarkStart).await?,
            });
            Ok(planner)
        })
    }
}

impl NexmarkPlanner {
    /// The first event after `committed`.
    fn committed_end(committed: Option<&SourceOffsets>) -> u64 {
        committed.map_or(0, SourceOffsets::end_value)
    }

    /// The table's rows `[start, end)` of the events in `input`.
    fn rows(&self, input: &SourceOffsets) -> Option<(u64, u64)> {
        match *input {
            SourceOffsets::Nexmark {
                start_event,
                end_event,
            } => Some((
                nexmark::rows_below(&self.spec, start_event),
                nexmark::rows_below(&self.spec, end_event),
            )),
            _ => None,
        }
    }
}

impl SourcePlanner for NexmarkPlanner {
    fn schema(&self) -> SchemaRef {
        nexmark::schema(self.spec.table)
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
                per_second: self.spec.events_per_second,
                total: self.spec.total_events,
                partitions: self.spec.partitions,
            };
            // The caps count the table's rows; a batch counts events.
            let events = |rows| nexmark::events_for_rows(&self.spec, rows);
            let next = paced.next(
                Self::committed_end(committed),
                limits.max_rows_per_batch.map(events),
                events(limits.max_rows_per_task),
            );
            Ok(match next {
                Next::Batch((start, end)) => Next::Batch(SourceOffsets::Nexmark {
                    start_event: start,
                    end_event: end,
                }),
                Next::Wait(d) => Next::Wait(d),
                Next::Finished => Next::Finished,
            })
        })
    }

    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String> {
        let end = Self::committed_end(committed);
        match next {
            SourceOffsets::Nexmark { start_event, .. } => (*start_event != end).then(|| {
                format!("starts at event {start_event}, but the previous batch ended at {end}")
            }),
            _ => Some("plans another source's input".into()),
        }
    }

    fn tasks(
        &self,
        plan: &OffsetRecord,
        input: &SourceOffsets,
    ) -> Result<Vec<(u32, pb::TaskSource)>, DriverError> {
        let Some((start_row, end_row)) = self.rows(input) else {
            return Err(super::other_source("nexmark", plan, input));
        };
        let source = pb::NexmarkSource::from(&self.spec);
        let range = (start_row, end_row);
        Ok(packed_tasks(
            self.spec.partitions,
            range,
            plan,
            |first, count| {
                pb::task_source::Kind::Nexmark(pb::NexmarkTask {
                    source: Some(source.clone()),
                    start_row,
                    end_row,
                    partition_count: count,
                    first_partition: first,
                })
            },
        ))
    }

    fn planned_rows(&self, offsets: &SourceOffsets) -> Option<u64> {
        self.rows(offsets).map(|(start, end)| end - start)
    }

    fn idle(&self, committed: Option<&SourceOffsets>) -> SourceOffsets {
        let end = Self::committed_end(committed);
        SourceOffsets::Nexmark {
            start_event: end,
            end_event: end,
        }
    }
}
