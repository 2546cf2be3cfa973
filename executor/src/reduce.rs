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
use sluice_common::state::StateFile;
use sluice_proto::{TaskAssignment, TaskOutput, sink};
use sluice_sql::Aggregation;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::stage;
use crate::state::codec;
use crate::state::table::{Change, StateTable};

/// Runs a reduce task.
pub async fn run(
    task: &TaskAssignment,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let malformed = |m: &str| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let reduce = task
        .reduce
        .as_ref()
        .ok_or_else(|| malformed("missing reduce"))?;
    let plan = task
        .plan
        .as_ref()
        .ok_or_else(|| malformed("missing plan"))?;
    let mode =
        OutputMode::parse(&reduce.output_mode).ok_or_else(|| malformed("unknown output mode"))?;
    let Some(sink::Kind::Files(files)) = task.sink.as_ref().and_then(|s| s.kind.as_ref()) else {
        return Err(malformed("missing sink"));
    };
    let input_schema =
        sluice_sql::decode_schema(&plan.input_schema).map_err(|e| malformed(&e.to_string()))?;
    let tables = crate::cache::tables(&caches, &plan.tables).await?;
    let empty = Box::pin(futures::stream::empty());
    let agg = Aggregation::plan(&plan.sql, input_schema, empty, &tables)
        .await?
        .ok_or_else(|| malformed("a reduce task for a query without an aggregation"))?;
    let store = stage::open_store(&caches, &reduce.checkpoint).await?;
    let schema = agg.partial_schema();
    let partials = stage::read_partials(&store, task.batch_id, reduce, &schema).await?;
    let (query, p) = (&task.query_id, task.partition);
    let mut table = stage::state(&caches, &store, task, reduce, schema, agg.key_columns()).await?;
    stage::snapshot(&caches, &store, reduce, p, stage::due(reduce, &table));

    let watermark = task.event_time.as_ref().and_then(|e| e.watermark_ms);
    let window = agg.window();
    let work = async {
        let merged = merge(&agg, &table, partials).await?;
        let changed = match mode {
            OutputMode::Update if agg.has_aggregates() => merged.clone(),
            OutputMode::Update => stage::filter(&merged, &table.is_new(&merged)?)?,
            OutputMode::Complete | OutputMode::Append => RecordBatch::new_empty(merged.schema()),
        };
        let none = RecordBatch::new_empty(merged.schema());
        let upserts = Change {
            upserts: merged,
            deletes: none.clone(),
        };
        table.apply(&upserts, task.batch_id)?;
        // Windows the watermark has passed are final: evicted, and in
        // append mode emitted. Complete mode keeps every group.
        let closed = match (window, watermark, mode) {
            (Some(w), Some(wm), OutputMode::Update | OutputMode::Append) => {
                stage::closed(table.rows(), w, wm)?
            }
            _ => none.clone(),
        };
        let evict = Change {
            upserts: none,
            deletes: closed,
        };
        table.apply(&evict, task.batch_id)?;
        // The delta is both steps, applied in the same order on a reload.
        let change = Change {
            upserts: upserts.upserts,
            deletes: evict.deletes,
        };
        let delta = codec::encode(&table.delta_schema(), &[table.to_delta(&change)?])?;
        store
            .write(&reduce.operator, p, StateFile::Delta(task.batch_id), delta)
            .await?;
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
        stage::write(&caches, &files.path, layout, agg.output_schema(), output).await
    };
    let (rows, files) = work.await?;
    let out = TaskOutput {
        rows,
        files,
        duration_ms: started.elapsed().as_millis() as u64,
        state_rows: table.len() as u64,
        state_bytes: table.bytes() as u64,
        ..Default::default()
    };
    caches.states.put(query, p, table);
    Ok(out)
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
