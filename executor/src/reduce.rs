//! The reduce stage of a stateful query: one state partition's shuffle
//! buckets folded into its state by one of the query's operators, the
//! next state version, and the output. Every operator runs through
//! [`run`].
//!
//! ```text
//!  shuffle ranges (map tasks in map order, then the operator feeding this one) ─► input rows
//!  state N-1 (held here, or loaded) ─► advance ─► upserts, deletes ─► evict(watermark)
//!    ─► expire (keys idle for state_ttl_ms: deleted, emit nothing)
//!    ─► state/<op>/<p>/<N>.delta (create-only)      state N kept here for batch N+1
//!    ─► emit ─► sink part files (the last operator)
//!            └► shuffle/<N>/<op + 1>-<p>.arrow, by the next operator's key (any other)
//! ```
//!
//! Invariant (determinism): given the same shuffle files and state N-1, a
//! reduce task writes the same delta and the same part files. So does a
//! state rebuilt from storage: it holds the same rows in the same order.

use std::sync::Arc;
use std::time::Instant;

use sluice_proto::{StateWork, TaskAssignment, TaskOutput};
use sluice_sql::Graph;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::operator::Operator;
use crate::output;
use crate::partition;
use crate::shuffle::{self, Keyer};
use crate::stage;

/// Runs a reduce task of operator `O`, configured by `work`, over the
/// state partition `state` names.
pub async fn run<O: Operator>(
    task: &TaskAssignment,
    state: Option<&StateWork>,
    work: &O::Work,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let work_state = state.ok_or_else(|| {
        ExecutorError::MalformedTask(format!("task {}: missing state", task.task_id))
    })?;
    let assigned = stage::assigned(task, &caches).await?;
    let graph = Graph::plan(
        &assigned.plan.sql,
        assigned.streams.clone(),
        sluice_sql::TaskInput::empty(),
        &assigned.tables,
        caches.task_limits(sluice_sql::guard::budget_ms(assigned.plan.plan_budget_ms)),
    )
    .await?;
    let index = work_state.index as usize;
    let op = O::plan(task, work, &assigned, (&graph, index)).await?;
    // State files are those of the work's state generation.
    let store = stage::open_store(&caches, &work_state.checkpoint)
        .await?
        .in_generation(work_state.generation);
    let schema_of = |side: u32| op.input_schema(side);
    let rows = stage::read_partials(&store, task.batch_id, work_state, schema_of).await?;
    let (mut table, rebuilt) =
        partition::state(&caches, &store, task, work_state, op.state_schema(), &op).await?;
    let due = partition::due(work_state, &table)?;
    partition::snapshot(&caches, &store, work_state, task.partition, due);

    let advanced = op.advance(&table, rows).await?;
    let unmatchable = advanced.unmatchable;
    let watermark = task.event_time.as_ref().and_then(|e| e.watermark_ms);
    let evict = |state: &_| op.evict(state, watermark);
    let change = advanced.change();
    let left = partition::advance(&mut table, &store, task, work_state, change, evict).await?;
    partition::bound(&caches, task, &table)?;
    let output = op.emit(advanced, left.evicted, &table).await?;

    let files = assigned.files;
    let next = match work_state.next_buckets {
        0 => None,
        n => Some((n, graph.consumer(index))),
    };
    let (written, shuffle) = match next {
        None => {
            let out = stage::write(&caches, files, task, op.output_schema(), output).await?;
            (out, Vec::new())
        }
        Some((buckets, Some((next, side)))) => {
            let keyer = match op.emits_changes() {
                true => Keyer::changes(&graph, next)?,
                false => Keyer::of(&graph, next, side)?,
            };
            let split = shuffle::split(&output, buckets, |b| keyer.keys(b))?;
            let to = (next as u32, side as u32);
            let part = shuffle::Part::new(to, op.output_schema(), split);
            let writer = (work_state.index + 1, task.partition);
            let (bytes, ranges) = shuffle::encode(vec![part], writer)?;
            if !bytes.is_empty() {
                store.write_shuffle(task.batch_id, writer, bytes).await?;
            }
            ((output::Emitted::default(), Default::default()), ranges)
        }
        Some((_, None)) => {
            return Err(ExecutorError::MalformedTask(format!(
                "task {}: operator {index} feeds no other operator",
                task.task_id
            )));
        }
    };
    let mut out = partition::done(&caches, task, table, written, started);
    out.shuffle = shuffle;
    out.state_expired = left.expired;
    out.rows_without_event_time = unmatchable;
    out.state_rebuild = rebuilt.to_proto();
    Ok(out)
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
