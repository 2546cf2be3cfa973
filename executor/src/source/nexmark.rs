//! The Nexmark source's reader: generates a task's rows of its table (see
//! `sluice_common::nexmark`), partition by partition, a chunk at a time.

use arrow_schema::SchemaRef;
use futures::StreamExt;
use sluice_common::nexmark;
use sluice_common::spec::NexmarkSpec;
use sluice_proto::NexmarkTask;

use super::{Batches, ReadCounters, SourceReader};
use crate::error::ExecutorError;

/// Reads the rows `[start, end)` of partitions `[first, first + count)`.
pub struct NexmarkReader {
    spec: NexmarkSpec,
    start: u64,
    end: u64,
    partitions: std::ops::Range<u32>,
}

impl NexmarkReader {
    pub fn new(task: &NexmarkTask) -> Result<Self, ExecutorError> {
        let bad = |m: String| ExecutorError::MalformedTask(format!("nexmark source: {m}"));
        let source = task
            .source
            .as_ref()
            .ok_or_else(|| bad("no settings".into()))?;
        let spec = NexmarkSpec::try_from(source).map_err(|e| bad(e.to_string()))?;
        let (first, count) = (task.first_partition, task.partition_count.max(1));
        if u64::from(first) + u64::from(count) > u64::from(spec.partitions) {
            return Err(bad("partition out of range".into()));
        }
        if task.end_row < task.start_row {
            return Err(bad("end_row is below start_row".into()));
        }
        Ok(NexmarkReader {
            spec,
            start: task.start_row,
            end: task.end_row,
            partitions: first..first + count,
        })
    }
}

impl SourceReader for NexmarkReader {
    fn schema(&self) -> SchemaRef {
        nexmark::schema(self.spec.table)
    }

    fn planned_rows(&self) -> Option<u64> {
        Some(sluice_common::rate::rows_of(
            self.partitions.clone(),
            self.spec.partitions,
            self.start,
            self.end,
        ))
    }

    fn read(self: Box<Self>, _counters: ReadCounters) -> Batches {
        let NexmarkReader {
            spec,
            start,
            end,
            partitions,
        } = *self;
        let chunks = partitions.flat_map(move |p| nexmark::chunks(&spec, p, start, end));
        futures::stream::iter(chunks.map(|c| c.map_err(ExecutorError::from))).boxed()
    }
}
