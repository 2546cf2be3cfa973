//! The rate source's reader: generates a task's rows from its range (see
//! `sluice_common::rate`), 64 Ki rows at a time, partition by partition.

use arrow_schema::SchemaRef;
use sluice_common::rate;
use sluice_proto::RateTask;

use futures::StreamExt;

use super::{Batches, Columns, ReadCounters, SourceReader};
use crate::error::ExecutorError;

/// Reads partitions `[first_partition, first_partition + count)`, one
/// after another.
pub struct RateReader {
    task: RateTask,
    partition: u32,
    count: u32,
}

impl RateReader {
    pub fn new(task: RateTask) -> Result<Self, ExecutorError> {
        let partition = task.first_partition;
        let bad = |m: &str| Err(ExecutorError::MalformedTask(format!("rate source: {m}")));
        let count = task.partition_count.max(1);
        if task.partitions == 0
            || u64::from(partition) + u64::from(count) > u64::from(task.partitions)
        {
            return bad("partition out of range");
        }
        if task.end_value < task.start_value {
            return bad("end_value is below start_value");
        }
        Ok(RateReader {
            task,
            partition,
            count,
        })
    }
}

impl RateReader {
    /// The partitions this task reads, in order.
    fn partitions(&self) -> std::ops::Range<u32> {
        self.partition..self.partition + self.count
    }
}

impl SourceReader for RateReader {
    fn schema(&self) -> SchemaRef {
        rate::schema()
    }

    fn planned_rows(&self) -> Option<u64> {
        let t = &self.task;
        Some(rate::rows_of(
            self.partitions(),
            t.partitions,
            t.start_value,
            t.end_value,
        ))
    }

    fn read(self: Box<Self>, columns: Columns, _counters: ReadCounters) -> Batches {
        let parts = self.partitions();
        let t = self.task;
        let chunks = parts.flat_map(move |p| {
            rate::chunks(
                p,
                t.partitions,
                t.rows_per_second,
                t.start_ms,
                t.start_value,
                t.end_value,
            )
        });
        let all = futures::stream::iter(chunks.map(|c| c.map_err(ExecutorError::from))).boxed();
        super::project(all, columns)
    }
}
