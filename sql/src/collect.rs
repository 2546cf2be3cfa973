//! Running a plan to its end inside a task: every output batch counts
//! against the task's memory pool (`--max-task-memory-bytes`) as it
//! arrives, and the task yields its thread after each one.
//!
//! ```text
//!  plan ─► execute_in_order ─► batch ─► reserve its bytes in the pool ─► yield ─► next
//!                                           └─ past the pool ─► SqlError::Resources (names the flag)
//! ```
//!
//! DataFusion counts what its operators hold (a hash join's build side, an
//! aggregation's groups) but not the batches a caller collects: a join
//! whose keys match most pairs emits far more than it holds. Reserving
//! the collected output makes such a task fail at its pool, naming the
//! limit, rather than take the executor's memory.
//!
//! Invariant: a collecting loop never runs a whole plan in one poll. A
//! plan whose stream is always ready (rows already in memory) would
//! otherwise hold its runtime thread until the plan ends, so a cancelled
//! task (a stopped query) would run on, and heartbeats sharing the thread
//! would wait. Yielding between output batches is not enough where an
//! operator works long between them (a hash join whose filter drops most
//! pairs loops over its whole probe side in one poll): such operators read
//! their rows through [`yielding_input`], which hands them a slice at a
//! time and yields before each, a join's slices sized by
//! [`join_slice_rows`] so that each compares a bounded number of pairs.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::arrow::array::{Array, ArrayData};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use futures::StreamExt;

use crate::SqlError;

/// A plan's output, with its bytes reserved in the task's pool until
/// this is dropped.
#[derive(Debug)]
pub struct Collected {
    pub batches: Vec<RecordBatch>,
    pub reservation: MemoryReservation,
}

/// Runs `plan` to its end in `ctx`, reserving each output batch in the
/// task's pool under the name `consumer` (shown in the error of a task
/// past its pool).
pub async fn collect_within(
    plan: Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
    consumer: &str,
) -> Result<Collected, SqlError> {
    let reservation = MemoryConsumer::new(consumer).register(ctx.memory_pool());
    let mut stream = crate::execute_in_order(plan, ctx)?;
    let mut batches = Vec::new();
    let mut held = Held::default();
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(SqlError::from_execution)?;
        reservation
            .try_grow(held.add(&batch))
            .map_err(SqlError::from_execution)?;
        batches.push(batch);
        tokio::task::yield_now().await;
    }
    Ok(Collected {
        batches,
        reservation,
    })
}

/// The memory a collected output holds: each buffer once. Output batches
/// are often slices of one larger batch (a join's output, cut to the
/// batch size), and each slice's arrays name the whole buffers: counted
/// per batch, they would count one buffer many times over.
#[derive(Default)]
struct Held {
    /// The allocations counted, by their start.
    seen: HashSet<usize>,
}

impl Held {
    /// The bytes of `batch`'s buffers not counted before.
    fn add(&mut self, batch: &RecordBatch) -> usize {
        batch
            .columns()
            .iter()
            .map(|c| self.add_data(&c.to_data()))
            .sum()
    }

    fn add_data(&mut self, data: &ArrayData) -> usize {
        let nulls = data.nulls().map(|n| n.inner().inner());
        let mut bytes: usize = data
            .buffers()
            .iter()
            .chain(nulls)
            .filter(|b| self.seen.insert(b.data_ptr().as_ptr() as usize))
            .map(|b| b.capacity())
            .sum();
        for child in data.child_data() {
            bytes += self.add_data(child);
        }
        bytes
    }
}

/// The most pairs of rows a join compares between two yields: its probe
/// side is sliced so that a slice times the build side's rows stays under
/// this, whatever the keys' fan-out. A million pairs take milliseconds in
/// a release build, a fraction of a second in a debug one.
const PAIRS_PER_SLICE: usize = 1 << 20;

/// The rows per slice of a join's inputs, for a build side of
/// `build_rows`: at most [`PAIRS_PER_SLICE`] pairs per probe slice, in
/// slices of 256 to 8,192 rows (DataFusion's batch size): a slice costs a
/// few microseconds of its own, so a large build side with unique keys is
/// not cut into slivers, and its bound is then 256 rows times the build.
pub(crate) fn join_slice_rows(build_rows: usize) -> usize {
    (PAIRS_PER_SLICE / build_rows.max(1)).clamp(256, 8192)
}

/// `batches` as a plan's input that hands out at most `slice_rows` rows
/// at a time and yields the thread before each slice, so that an operator
/// doing much work per input row returns to the runtime between slices:
/// its task can then be cancelled, and other tasks run.
pub(crate) fn yielding_input(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    slice_rows: usize,
) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
    assert!(slice_rows > 0, "slices of no rows never end");
    let slices = Arc::new(Slices {
        schema,
        batches,
        slice_rows,
    });
    let exec = StreamingTableExec::try_new(
        slices.schema.clone(),
        vec![slices as Arc<dyn PartitionStream>],
        None,
        [],
        false,
        None,
    )
    .map_err(SqlError::from_planning)?;
    Ok(Arc::new(exec))
}

/// Rows in memory, read a slice at a time: [`yielding_input`].
#[derive(Debug)]
struct Slices {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    slice_rows: usize,
}

impl PartitionStream for Slices {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let n = self.slice_rows;
        let slices: Vec<RecordBatch> = self
            .batches
            .iter()
            .flat_map(|b| {
                (0..b.num_rows())
                    .step_by(n)
                    .map(move |at| b.slice(at, n.min(b.num_rows() - at)))
            })
            .collect();
        let stream = futures::stream::iter(slices).then(|slice| async move {
            tokio::task::yield_now().await;
            Ok(slice)
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    /// `batches` batches of `rows` rows, each with buffers of its own.
    fn plan(batches: usize, rows: usize) -> Arc<dyn ExecutionPlan> {
        let batch = |_| {
            let values = Int64Array::from_iter_values(0..rows as i64);
            RecordBatch::try_new(schema(), vec![Arc::new(values)]).unwrap()
        };
        let batches: Vec<_> = (0..batches).map(batch).collect();
        MemorySourceConfig::try_new_exec(&[batches], schema(), None).unwrap()
    }

    #[tokio::test]
    async fn slices_of_one_batch_count_its_buffers_once() {
        let values = Int64Array::from_iter_values(0..64 * 1024);
        let whole = RecordBatch::try_new(schema(), vec![Arc::new(values)]).unwrap();
        let bytes = whole.column(0).to_data().buffers()[0].capacity();
        assert!(bytes >= 512 * 1024);
        let slices: Vec<_> = (0..64).map(|i| whole.slice(i * 1024, 1024)).collect();
        let sliced = MemorySourceConfig::try_new_exec(&[slices], schema(), None).unwrap();
        // Each slice names all 512 KiB: counted per batch, 32 MiB.
        let ctx = crate::session::context(Some(4 << 20)).unwrap();
        let out = collect_within(sliced, ctx.task_ctx(), "output")
            .await
            .unwrap();
        assert_eq!(out.batches.len(), 64);
        assert_eq!(out.reservation.size(), bytes);
    }

    #[tokio::test]
    async fn output_past_the_pool_fails_naming_the_consumer() {
        let ctx = crate::session::context(Some(1 << 20)).unwrap();
        // 64 batches of 8 KiB of values each: 512 KiB, within 1 MiB.
        let ok = collect_within(plan(64, 1024), ctx.task_ctx(), "join output")
            .await
            .unwrap();
        assert_eq!(ok.batches.len(), 64);
        assert!(ok.reservation.size() >= 64 * 8 * 1024);
        // With those held, another 1 MiB does not fit.
        let e = collect_within(plan(128, 1024), ctx.task_ctx(), "join output")
            .await
            .unwrap_err();
        assert!(matches!(e, SqlError::Resources(_)), "{e}");
        let text = e.to_string();
        for w in ["join output", "--max-task-memory-bytes"] {
            assert!(text.contains(w), "no {w:?} in {text}");
        }
        drop(ok);
        collect_within(plan(64, 1024), ctx.task_ctx(), "join output")
            .await
            .expect("the pool is free again once the first output is dropped");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_collecting_task_lets_others_run_between_batches() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let ran = Arc::new(AtomicBool::new(false));
        let other = tokio::spawn({
            let ran = ran.clone();
            async move { ran.store(true, Ordering::SeqCst) }
        });
        // On one thread, the spawned task runs before the collecting one
        // ends only if collecting yields (four ready batches never exhaust
        // tokio's cooperative budget on their own).
        let ctx = crate::session::context(None).unwrap();
        let out = collect_within(plan(4, 10), ctx.task_ctx(), "output")
            .await
            .unwrap();
        assert!(ran.load(Ordering::SeqCst), "collecting never yielded");
        assert_eq!(out.batches.len(), 4);
        other.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_yielding_input_hands_out_slices_and_yields_before_each() {
        let batch = |rows: i64| {
            let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
            RecordBatch::try_new(
                schema,
                vec![Arc::new(Int64Array::from_iter_values(0..rows))],
            )
            .unwrap()
        };
        let (a, b) = (batch(2500), batch(10));
        let input = yielding_input(a.schema(), vec![a, b], 1024).unwrap();
        let ctx = crate::session::context(None).unwrap();
        let mut stream = input.execute(0, ctx.task_ctx()).unwrap();
        let (mut sizes, mut pending) = (Vec::new(), 0);
        loop {
            match futures::poll!(stream.next()) {
                std::task::Poll::Pending => pending += 1,
                std::task::Poll::Ready(Some(b)) => sizes.push(b.unwrap().num_rows()),
                std::task::Poll::Ready(None) => break,
            }
        }
        assert_eq!(sizes, [1024, 1024, 452, 10]);
        assert!(pending >= sizes.len(), "{pending} yields for {sizes:?}");
    }

    #[test]
    fn join_slices_bound_the_pairs_compared_between_yields() {
        assert_eq!(join_slice_rows(0), 8192);
        assert_eq!(join_slice_rows(10), 8192);
        assert_eq!(join_slice_rows(1024), 1024);
        assert_eq!(join_slice_rows(2_000), 524);
        assert!(join_slice_rows(2_000) * 2_000 <= PAIRS_PER_SLICE);
        assert_eq!(join_slice_rows(10_000), 256);
        assert_eq!(join_slice_rows(100_000_000), 256);
    }
}
