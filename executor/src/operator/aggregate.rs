//! The aggregation: one state row per group, merged batch by batch.
//!
//! ```text
//!  shuffle ranges, in map order ─► partial rows P
//!  state N-1 ─► the state rows of P's keys: O
//!  merge(O ++ P) = M, one state row per key the batch touched ─► upserts
//!  output: update   ─► final values of M (a DISTINCT: of M's new keys)
//!          complete ─► final values of all of state N
//!          append   ─► final values of the windows the watermark closed
//!          changes  ─► O retracted, M added, as the next aggregation's input rows
//! ```
//!
//! An aggregation that reads another's changes keeps its input rows
//! instead of partial rows ([`super::changes`]).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_select::concat::concat_batches;
use sluice_common::spec::OutputMode;
use sluice_proto::{AggregateWork, Changes, TaskAssignment};
use sluice_sql::{Aggregation, Graph};

use super::{Advanced, Operator, Shuffled, changes, session};
use crate::error::ExecutorError;
use crate::shuffle;
use crate::stage::{self, Assigned};
use crate::state::rescale::Repartition;
use crate::state::table::StateTable;

/// A query's aggregation over the stream.
pub struct Aggregate {
    agg: Aggregation,
    mode: OutputMode,
    changes: Changes,
}

impl Repartition for Aggregate {
    /// By the group key, less its session (the map tasks' shuffle key); an
    /// aggregation that reads changes keeps input rows, keyed by their
    /// group.
    fn route(&self, rows: &RecordBatch, partitions: u32) -> Result<Vec<u32>, ExecutorError> {
        let keys = match self.changes {
            Changes::Read => {
                let input = self.agg.input_rows_schema();
                let columns = rows.columns()[..input.fields().len()].to_vec();
                let input = RecordBatch::try_new(input, columns)
                    .map_err(|e| ExecutorError::TaskPanicked(format!("rescale: {e}")))?;
                self.agg.group_of(&input)?
            }
            _ => (0..self.agg.key_columns())
                .filter(|&i| Some(i) != self.agg.session())
                .map(|i| rows.column(i).clone())
                .collect(),
        };
        shuffle::buckets_of(&keys, rows.num_rows(), partitions)
    }
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
        let changes = Changes::try_from(work.changes).map_err(|_| {
            ExecutorError::MalformedTask(format!("task {}: unknown changes", task.task_id))
        })?;
        let fits = match changes {
            Changes::None => true,
            Changes::Emit => agg.feeds_aggregation() && agg.session().is_none(),
            Changes::Read => agg.session().is_none() && mode != OutputMode::Append,
        };
        if !fits {
            return Err(ExecutorError::MalformedTask(format!(
                "task {}: operator {index} cannot {changes:?} changes in {mode:?} mode",
                task.task_id
            )));
        }
        Ok(Aggregate { agg, mode, changes })
    }

    fn input_schema(&self, _side: u32) -> Result<SchemaRef, ExecutorError> {
        Ok(match self.changes {
            Changes::Read => sluice_sql::with_diff(&self.agg.input_rows_schema()),
            _ => self.agg.partial_schema(),
        })
    }

    fn state_schema(&self) -> (SchemaRef, usize) {
        match self.changes {
            Changes::Read => changes::state_schema(&self.agg),
            _ => (self.agg.partial_schema(), self.agg.key_columns()),
        }
    }

    /// The query's names of its keys and aggregates; an aggregation that
    /// reads changes keeps its input rows, named as its input names them.
    fn state_names(&self) -> Vec<String> {
        match self.changes {
            Changes::Read => {
                let (schema, _) = self.state_schema();
                schema.fields().iter().map(|f| f.name().clone()).collect()
            }
            _ => self.agg.state_names(),
        }
    }

    fn output_schema(&self) -> SchemaRef {
        match self.changes {
            Changes::Emit => self
                .agg
                .changes_schema()
                .expect("planning checked that it feeds an aggregation"),
            _ => self.agg.output_schema(),
        }
    }

    fn emits_changes(&self) -> bool {
        self.changes == Changes::Emit
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
                retracted: None,
                unmatchable: 0,
            });
        }
        if self.changes == Changes::Read {
            return changes::advance(state, super::rows(rows));
        }
        let (old, merged) = merge(&self.agg, state, super::rows(rows)).await?;
        let changed = match self.mode {
            _ if self.changes == Changes::Emit => Some(merged.clone()),
            OutputMode::Update if self.agg.has_aggregates() => Some(merged.clone()),
            OutputMode::Update => Some(stage::filter(&merged, &state.is_new(&merged)?)?),
            OutputMode::Complete | OutputMode::Append => None,
        };
        Ok(Advanced {
            deletes: None,
            upserts: merged,
            pending: changed,
            retracted: (self.changes == Changes::Emit).then_some(old),
            unmatchable: 0,
        })
    }

    /// Windows the watermark has passed are final: a window whose end is
    /// at most the watermark, a session whose end is before it (a row at
    /// the watermark is on time, and would extend a session ending there).
    /// Complete mode keeps every group, and so does an aggregation that
    /// reads changes: a row of a closed window may still be retracted.
    fn evict(
        &self,
        state: &StateTable,
        watermark: Option<i64>,
    ) -> Result<Option<RecordBatch>, ExecutorError> {
        if self.changes == Changes::Read {
            return Ok(None);
        }
        let watermark = match self.agg.session() {
            Some(_) => watermark.map(|wm| wm.saturating_sub(1)),
            None => watermark,
        };
        stage::evict_closed(state, self.agg.window(), watermark, self.mode)
    }

    async fn emit(
        &self,
        advanced: Advanced,
        evicted: RecordBatch,
        state: &StateTable,
    ) -> Result<Vec<RecordBatch>, ExecutorError> {
        match self.changes {
            Changes::Emit => {
                let none = || RecordBatch::new_empty(self.agg.partial_schema());
                let old = advanced.retracted.unwrap_or_else(none);
                let new = advanced.pending.unwrap_or_else(none);
                return Ok(self.agg.changes(old, new).await?);
            }
            Changes::Read => {
                let touched = match self.mode {
                    // As a partition of partial rows: no rows, no output
                    // (a global aggregate's one group lives in one
                    // partition, the others hold nothing).
                    OutputMode::Complete if state.len() == 0 => return Ok(Vec::new()),
                    OutputMode::Complete => None,
                    _ => match &advanced.pending {
                        Some(t) => Some(t),
                        None => return Ok(Vec::new()),
                    },
                };
                let groups = changes::groups(&self.agg, state, touched)?;
                let mut out = self.agg.aggregate(vec![groups.rows]).await?;
                if let Some(emptied) = &groups.emptied {
                    out.extend(self.agg.aggregate_emptied(emptied).await?);
                }
                return Ok(out);
            }
            Changes::None => {}
        }
        let emitted = stage::emitted(self.mode, advanced.pending, evicted, state)?;
        if emitted.num_rows() == 0 {
            return Ok(Vec::new());
        }
        Ok(self.agg.finish(vec![emitted]).await?)
    }
}

/// The state rows of the keys of `partials` before the batch, and one
/// state row per key after it: the state's row merged with the batch's
/// partial rows.
async fn merge(
    agg: &Aggregation,
    table: &StateTable,
    partials: Vec<RecordBatch>,
) -> Result<(RecordBatch, RecordBatch), ExecutorError> {
    let schema = agg.partial_schema();
    if partials.iter().all(|b| b.num_rows() == 0) {
        let none = RecordBatch::new_empty(schema);
        return Ok((none.clone(), none));
    }
    let (old, _) = table.lookup(&partials)?;
    let mut input = Vec::with_capacity(partials.len() + 1);
    input.push(old.clone());
    input.extend(partials);
    let merged = agg.merge(input).await?;
    let merged =
        concat_batches(&schema, &merged).map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?;
    Ok((old, merged))
}
