//! A stateful query: one aggregation over the streams, split into the two
//! stages of a batch with DataFusion's own aggregate modes.
//!
//! ```text
//!  map task:     input ─► [filter, project, join, union] ─► Partial ──────► partial rows
//!  reduce task:  state rows of the keys seen ∪ partial rows ─► PartialReduce ─► state rows
//!                state rows (changed, all or evicted) ─► Final ─► [HAVING, SELECT] ─► output
//! ```
//!
//! A partial row is the group key followed by each aggregate's
//! intermediate state (`avg` keeps a count and a sum, `count(DISTINCT x)`
//! the list of values). State rows have the same schema, so merging a
//! batch into the state is the same operation as merging two map tasks,
//! and a reloaded state is byte for byte the state that was saved.
//!
//! A map task reads one stream; the query's other streams are empty for
//! it (see [`crate::Streams`]). Every stream is read beneath the one
//! aggregation (`support` refuses the rest), so the partial rows of the
//! tasks of every stream merge into the query's one state.
//!
//! Invariant (determinism): every stage reads its input in a fixed order
//! (one partition, or a partition per stream of a `UNION`, run one after
//! another), and DataFusion's hash aggregation emits groups in the order
//! they first appear; so each stage's output is a pure function of its
//! input.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion::prelude::SessionContext;

use crate::graph::{Graph, Kind, partial_beneath};
use crate::input::SharedInput;
use crate::{Output, SqlError, Streams, Table};

/// The aggregation of a planned stateful query.
pub struct Aggregation {
    ctx: SessionContext,
    /// What its output runs through (`node` is in it): the side of the
    /// operator it feeds, or the whole plan.
    root: Arc<dyn ExecutionPlan>,
    node: Arc<dyn ExecutionPlan>,
    group_by: Arc<PhysicalGroupBy>,
    aggr_expr: Vec<Arc<AggregateFunctionExpr>>,
    filter_expr: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// What the aggregation reads: the streams, filtered and projected.
    input: Arc<dyn ExecutionPlan>,
    /// The task's input itself, for [`Output::read_rest`].
    stream: SharedInput,
    partial: SchemaRef,
    /// When it feeds another aggregation: that aggregation's input
    /// fragment, beneath its Partial node (see [`changes`]).
    changes_root: Option<Arc<dyn ExecutionPlan>>,
}

impl std::fmt::Debug for Aggregation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregation")
            .field("partial", &self.partial)
            .finish_non_exhaustive()
    }
}

impl Aggregation {
    /// Plans `sql` over the stream tables `streams`, the one it reads being
    /// `input`, and the static `tables` within `limits`: its last
    /// aggregation over streams; `None` when it has none.
    pub async fn plan(
        sql: &str,
        streams: impl Into<Streams>,
        input: impl Into<crate::TaskInput>,
        tables: &[Table],
        limits: impl Into<crate::RunLimits>,
    ) -> Result<Option<Self>, SqlError> {
        let last = (Kind::Aggregate, Self::of as crate::graph::Of<Self>);
        Graph::last_of(sql, streams, input, tables, limits, last).await
    }

    /// The aggregation that is operator `i` of `graph`.
    pub fn of(graph: &Graph, i: usize) -> Result<Self, SqlError> {
        let node = graph.node(i);
        let agg = node
            .downcast_ref::<AggregateExec>()
            .ok_or_else(|| unexpected("an aggregation that is not an aggregate node"))?;
        // A Final over a Partial, or a Single: either way the raw side.
        let raw = match agg.mode() {
            AggregateMode::Single | AggregateMode::SinglePartitioned => agg,
            _ => partial_beneath(agg)
                .ok_or_else(|| unexpected(&format!("an aggregation in mode {:?}", agg.mode())))?,
        };
        if raw.group_expr().has_grouping_set() {
            return Err(SqlError::Unsupported {
                construct: "GROUPING SETS, CUBE or ROLLUP".into(),
                reason: "a streaming aggregation keeps one grouping".into(),
            });
        }
        let partial = graph.side_plan(i, 0);
        let changes_root = graph.consumer(i).and_then(|(c, s)| {
            let side = graph.side_plan(c, s);
            let p = side.downcast_ref::<AggregateExec>()?;
            (*p.mode() == AggregateMode::Partial).then(|| p.input().clone())
        });
        Ok(Aggregation {
            changes_root,
            group_by: Arc::new(raw.group_expr().clone()),
            aggr_expr: raw.aggr_expr().to_vec(),
            filter_expr: raw.filter_expr().to_vec(),
            input: raw.input().clone(),
            stream: graph.input(),
            partial: partial.schema(),
            ctx: graph.ctx(),
            root: graph.above(i),
            node: node.clone(),
        })
    }

    /// The schema of partial rows and of state rows: the group key columns,
    /// then the aggregates' states.
    pub fn partial_schema(&self) -> SchemaRef {
        self.partial.clone()
    }

    /// The names a user reads the columns of a state row by: the
    /// query's own names of its group keys and aggregates, where it gives
    /// them (see [`crate::state_names`]).
    pub fn state_names(&self) -> Vec<String> {
        crate::state_names::of_state(
            &self.root,
            &self.node,
            &self.partial,
            self.key_columns(),
            &self.aggr_expr,
        )
    }

    /// How many leading columns of a partial row are the group key.
    pub fn key_columns(&self) -> usize {
        self.group_by.expr().len()
    }

    /// Whether the aggregation computes anything beyond its groups (a
    /// `SELECT DISTINCT` does not).
    pub fn has_aggregates(&self) -> bool {
        !self.aggr_expr.is_empty()
    }

    /// The group key column that is an event-time window, if one is: its
    /// index in a state row, and how the window's end is found. State
    /// behind the watermark is evicted by it.
    pub fn window(&self) -> Option<(usize, WindowEnd)> {
        let fields = self.partial.fields();
        self.group_by
            .expr()
            .iter()
            .enumerate()
            .find_map(|(i, (expr, _))| {
                if *fields[i].data_type() == crate::window::window_type() {
                    return Some((i, WindowEnd::Field));
                }
                date_bin_stride(expr).map(|ms| (i, WindowEnd::Plus(ms)))
            })
    }

    /// The group key column that is a session window
    /// (`session_window(ts, gap)`), if one is: its index in a state row.
    /// Its sessions are merged by the reduce stage, and it is also the
    /// aggregation's [`Self::window`].
    pub fn session(&self) -> Option<usize> {
        use datafusion::physical_expr::ScalarFunctionExpr;
        self.group_by.expr().iter().position(|(e, _)| {
            e.downcast_ref::<ScalarFunctionExpr>()
                .is_some_and(|f| f.name() == crate::session_window::NAME)
        })
    }

    /// The schema of the query's output rows.
    pub fn output_schema(&self) -> SchemaRef {
        self.root.schema()
    }

    /// Map stage: the task's input (the stream it reads; the others are
    /// empty), aggregated into partial rows. Runs the input once; a second
    /// call is a bug.
    pub fn map(&self) -> Result<Output, SqlError> {
        let partial = AggregateExec::try_new(
            AggregateMode::Partial,
            self.group_by.clone(),
            self.aggr_expr.clone(),
            self.filter_expr.clone(),
            self.input.clone(),
            self.input.schema(),
        )
        .map_err(SqlError::from_planning)?;
        let stream = crate::execute_in_order(Arc::new(partial), self.ctx.task_ctx())?;
        Ok(Output {
            schema: self.partial.clone(),
            stream,
            input: Some(self.stream.clone()),
        })
    }

    /// Merges partial rows (state rows first, then a batch's partials)
    /// into one state row per key, in the order the keys first appear.
    pub async fn merge(&self, rows: Vec<RecordBatch>) -> Result<Vec<RecordBatch>, SqlError> {
        let merge = self.over_partials(AggregateMode::PartialReduce, rows)?;
        let merged =
            crate::collect::collect_within(merge, self.ctx.task_ctx(), "aggregation state").await?;
        Ok(merged.batches)
    }

    /// The output rows of the groups in `state` (state rows): their
    /// final values, through the rest of the query (HAVING, SELECT).
    pub async fn finish(&self, state: Vec<RecordBatch>) -> Result<Vec<RecordBatch>, SqlError> {
        let last = self.over_partials(AggregateMode::Final, state)?;
        crate::run_above(&self.ctx, &self.root, &self.node, last).await
    }

    fn over_partials(
        &self,
        mode: AggregateMode,
        rows: Vec<RecordBatch>,
    ) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
        let source = MemorySourceConfig::try_new_exec(&[rows], self.partial.clone(), None)
            .map_err(SqlError::from_planning)?;
        let exec = AggregateExec::try_new(
            mode,
            self.group_by.as_final(),
            self.aggr_expr.clone(),
            vec![None; self.aggr_expr.len()],
            source,
            self.input.schema(),
        )
        .map_err(SqlError::from_planning)?;
        Ok(Arc::new(exec))
    }
}

/// Where a window's end is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowEnd {
    /// The key is a `window()` struct: its `end` field.
    Field,
    /// The key is a `date_bin(stride, ts)` start: the end is this many
    /// milliseconds later.
    Plus(i64),
}

/// The stride of a `date_bin(INTERVAL ..., ts)` group key, in
/// milliseconds.
pub(crate) fn date_bin_stride(expr: &Arc<dyn PhysicalExpr>) -> Option<i64> {
    use datafusion::physical_expr::ScalarFunctionExpr;
    use datafusion::physical_expr::expressions::Literal;
    let f = expr.downcast_ref::<ScalarFunctionExpr>()?;
    if f.name() != "date_bin" {
        return None;
    }
    let stride = f.args().first()?.downcast_ref::<Literal>()?;
    let ms = match stride.value() {
        datafusion::common::ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            i64::from(i.days) * 86_400_000 + i.nanoseconds / 1_000_000
        }
        datafusion::common::ScalarValue::IntervalDayTime(Some(i)) => {
            i64::from(i.days) * 86_400_000 + i64::from(i.milliseconds)
        }
        _ => return None,
    };
    (ms > 0).then_some(ms)
}

fn unexpected(what: &str) -> SqlError {
    SqlError::Unsupported {
        construct: what.into(),
        reason: "Sluice cannot split it into map and reduce stages".into(),
    }
}

#[path = "changes.rs"]
pub mod changes;

#[cfg(test)]
#[path = "stateful_tests.rs"]
mod tests;
