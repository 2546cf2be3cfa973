//! The aggregation: one state row per group, merged batch by batch.
//!
//! ```text
//!  shuffle ranges, in map order ─► partial rows P
//!  state N-1 ─► the state rows of P's keys: O
//!  merge(O ++ P) = M, one state row per key the batch touched ─► upserts
//!  output: update   ─► final values of M (a DISTINCT: of M's new keys)
//!          complete ─► final values of all of state N
//!          append   ─► final values of the windows the watermark closed
//! ```

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_select::concat::concat_batches;
use sluice_common::spec::OutputMode;
use sluice_proto::{AggregateWork, TaskAssignment};
use sluice_sql::{Aggregation, Graph};

use super::{Advanced, Operator, Shuffled, session};
use crate::error::ExecutorError;
use crate::stage::{self, Assigned};
use crate::state::table::StateTable;

/// A query's aggregation over the stream.
pub struct Aggregate {
    agg: Aggregation,
    mode: OutputMode,
}

impl Operator for Aggregate {
    type Work = AggregateWork;

    async fn plan(
        task: &TaskAssignment,
        work: &AggregateWork,
        _assigned: &Assigned<'_>,
        (graph, index): (&Graph, usize),
    ) -> Result<Self, ExecutorError> {
        let mode = stage::output_mode(task, work.output_mode)?;
        let agg = Aggregation::of(graph, index)?;
        Ok(Aggregate { agg, mode })
    }

    fn input_schema(&self, _side: u32) -> Result<SchemaRef, ExecutorError> {
        Ok(self.agg.partial_schema())
    }

    fn state_schema(&self) -> (SchemaRef, usize) {
        (self.agg.partial_schema(), self.agg.key_columns())
    }

    fn output_schema(&self) -> SchemaRef {
        self.agg.output_schema()
    }

    async fn advance(
        &self,
        state: &StateTable,
        rows: Vec<Shuffled>,
    ) -> Result<Advanced, ExecutorError> {
        if let Some(session) = self.agg.session() {
            let partials = super::rows(rows);
            let (upserts, deletes) = session::advance(&self.agg, session, state, partials).await?;
            let pending = (self.mode == OutputMode::Update).then(|| upserts.clone());
            return Ok(Advanced {
                upserts,
                deletes: Some(deletes),
                pending,
            });
        }
        let merged = merge(&self.agg, state, super::rows(rows)).await?;
        let changed = match self.mode {
            OutputMode::Update if self.agg.has_aggregates() => Some(merged.clone()),
            OutputMode::Update => Some(stage::filter(&merged, &state.is_new(&merged)?)?),
            OutputMode::Complete | OutputMode::Append => None,
        };
        Ok(Advanced {
            deletes: None,
            upserts: merged,
            pending: changed,
        })
    }

    /// Windows the watermark has passed are final: a window whose end is
    /// at most the watermark, a session whose end is before it (a row at
    /// the watermark is on time, and would extend a session ending there).
    /// Complete mode keeps every group.
    fn evict(
        &self,
        rows: &RecordBatch,
        watermark: Option<i64>,
    ) -> Result<Option<RecordBatch>, ExecutorError> {
        let watermark = match self.agg.session() {
            Some(_) => watermark.map(|wm| wm.saturating_sub(1)),
            None => watermark,
        };
        stage::evict_closed(rows, self.agg.window(), watermark, self.mode)
    }

    async fn emit(
        &self,
        pending: Option<RecordBatch>,
        evicted: RecordBatch,
        state: &StateTable,
    ) -> Result<Vec<RecordBatch>, ExecutorError> {
        let emitted = stage::emitted(self.mode, pending, evicted, state);
        if emitted.num_rows() == 0 {
            return Ok(Vec::new());
        }
        Ok(self.agg.finish(vec![emitted]).await?)
    }
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
