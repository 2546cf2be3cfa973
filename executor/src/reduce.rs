//! The reduce stage of a stateful query: one state partition's shuffle
//! buckets merged into its state, the next state version, and the output.
//!
//! ```text
//!  shuffle ranges, in map order ─► partial rows P
//!  state N-1 (held here, or loaded) ─► the state rows of P's keys: O
//!  merge(O ++ P) = M, one state row per key the batch touched
//!  M ─► state/<op>/<p>/<N>.delta (create-only)        state N = state N-1 with M
//!  output: update   ─► final values of M (a DISTINCT: of M's new keys)
//!          complete ─► final values of all of state N
//!        ─► sink part files; state N kept here for batch N+1
//! ```
//!
//! Invariant (determinism): given the same shuffle files and state N-1, a
//! reduce task writes the same delta and the same part files. So does a
//! state rebuilt from storage: it holds the same rows in the same order.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_select::concat::concat_batches;
use sluice_common::spec::OutputMode;
use sluice_proto::{TaskAssignment, TaskOutput};
use sluice_sql::Aggregation;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::stage;
use crate::state::table::StateTable;

/// Runs a reduce task.
pub async fn run(
    task: &TaskAssignment,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let malformed = |m: &str| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let stage::Assigned {
        reduce,
        plan,
        files,
        input_schema,
        tables,
    } = stage::assigned(task, &caches).await?;
    let budget = sluice_sql::guard::budget_ms(plan.plan_budget_ms);
    let mode = OutputMode::from_proto(reduce.output_mode)
        .ok_or_else(|| malformed("unknown output mode"))?;
    let empty = Box::pin(futures::stream::empty());
    let agg = Aggregation::plan(&plan.sql, input_schema, empty, &tables, budget)
        .await?
        .ok_or_else(|| malformed("a reduce task for a query without an aggregation"))?;
    let store = stage::open_store(&caches, &reduce.checkpoint).await?;
    let schema = agg.partial_schema();
    let partials = stage::read_partials(&store, task.batch_id, reduce, &schema).await?;
    let p = task.partition;
    let mut table = stage::state(&caches, &store, task, reduce, schema, agg.key_columns()).await?;
    stage::snapshot(&caches, &store, reduce, p, stage::due(reduce, &table));

    let watermark = task.event_time.as_ref().and_then(|e| e.watermark_ms);
    let window = agg.window();
    let merged = merge(&agg, &table, partials).await?;
    let changed = match mode {
        OutputMode::Update if agg.has_aggregates() => merged.clone(),
        OutputMode::Update => stage::filter(&merged, &table.is_new(&merged)?)?,
        OutputMode::Complete | OutputMode::Append => RecordBatch::new_empty(merged.schema()),
    };
    // Windows the watermark has passed are final: evicted, and in
    // append mode emitted. Complete mode keeps every group.
    let evict = |rows: &RecordBatch| match (window, watermark, mode) {
        (Some(w), Some(wm), OutputMode::Update | OutputMode::Append) => {
            stage::closed(rows, w, wm).map(Some)
        }
        _ => Ok(None),
    };
    let change = stage::advance(&mut table, &store, task, reduce, merged, evict).await?;
    let emitted = match mode {
        OutputMode::Update => changed,
        OutputMode::Complete => table.rows().clone(),
        OutputMode::Append => change.deletes,
    };
    stage::bound(&caches, task, &table)?;
    let output = if emitted.num_rows() == 0 {
        Vec::new()
    } else {
        agg.finish(vec![emitted]).await?
    };
    let layout = stage::layout(files, task);
    let written = stage::write(&caches, &files.path, layout, agg.output_schema(), output).await?;
    Ok(stage::done(&caches, task, table, written, started))
}

/// One state row per key of `partials`: the state's row merged with the
/// batch's partial rows.
async fn merge(
    agg: &Aggregation,
    table: &StateTable,
    partials: Vec<RecordBatch>,
) -> Result<RecordBatch, ExecutorError> {
    let schema = agg.partial_schema();
    if partials.iter().all(|b| b.num_rows() == 0) {
        return Ok(RecordBatch::new_empty(schema));
    }
    let (old, _) = table.lookup(&partials)?;
    let mut input = Vec::with_capacity(partials.len() + 1);
    input.push(old);
    input.extend(partials);
    let merged = agg.merge(input).await?;
    concat_batches(&schema, &merged).map_err(|e| ExecutorError::TaskPanicked(e.to_string()))
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
