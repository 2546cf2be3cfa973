//! Top-N per group: `ROW_NUMBER() OVER (PARTITION BY k ORDER BY x)`
//! filtered by `rn <= N`, split into the two stages of a batch around
//! DataFusion's own window node.
//!
//! ```text
//!  map task:    input ─► [filter, project, union] ─► the window node's input rows, unsorted
//!  reduce task: the kept rows of the batch's groups ++ the batch's rows ─► rank ─► ranks that changed
//!               ranked rows (the node's own output: the row, then its rank) ─► [rn <= N, SELECT] ─► output
//! ```
//!
//! Ranks are ROW_NUMBER's, by the node's `ORDER BY`, with ties going to
//! the row that arrived first (a kept row before a batch's, a batch's in
//! input order): a group's ranks are a pure function of its rows in
//! arrival order. A group's rows only grow (its input is a stream), so a
//! rank once filled stays filled, and a batch's change to a group is the
//! ranks whose row changed; each is emitted as an upsert of (group, rank).

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{Field, SchemaRef};
use datafusion::arrow::compute::{SortColumn, lexsort_to_indices};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion::prelude::SessionContext;

mod find;

pub use find::MAX_N;
use find::{limit, unsupported_window, window_exprs};

use crate::graph::{Graph, Kind};
use crate::input::SharedInput;
use crate::stateful::WindowEnd;
use crate::{Output, SqlError, Streams, Table};

/// The top-N of a planned query.
pub struct TopN {
    ctx: SessionContext,
    root: Arc<dyn ExecutionPlan>,
    /// The window node; its output is a row, then its rank.
    node: Arc<dyn ExecutionPlan>,
    /// The rows the node ranks, unsorted.
    below: Arc<dyn ExecutionPlan>,
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    order_by: Vec<datafusion::physical_expr::PhysicalSortExpr>,
    limit: u64,
    /// The task's input itself, for [`Output::read_rest`].
    stream: SharedInput,
}

impl std::fmt::Debug for TopN {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopN")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// What the driver checks of a query's top-N.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopNInfo {
    /// N: how many rows of each group are kept.
    pub limit: u64,
}

impl TopN {
    /// Plans `sql` over `streams` and the static `tables` within `limits`:
    /// its last top-N; `None` when the query has none.
    pub async fn plan(
        sql: &str,
        streams: impl Into<Streams>,
        input: impl Into<crate::TaskInput>,
        tables: &[Table],
        limits: impl Into<crate::RunLimits>,
    ) -> Result<Option<Self>, SqlError> {
        let last = (Kind::TopN, Self::of as crate::graph::Of<Self>);
        Graph::last_of(sql, streams, input, tables, limits, last).await
    }

    /// The top-N that is operator `i` of `graph`.
    pub fn of(graph: &Graph, i: usize) -> Result<Self, SqlError> {
        let node = graph.node(i).clone();
        let [w] = window_exprs(&node) else {
            return Err(unsupported_window(&node));
        };
        let limit = limit(graph.root(), &node, graph.consumer(i).is_none())?;
        Ok(TopN {
            ctx: graph.ctx(),
            root: graph.above(i),
            below: graph.side_plan(i, 0),
            partition_by: w.partition_by().to_vec(),
            order_by: w.order_by().to_vec(),
            node,
            limit,
            stream: graph.input(),
        })
    }

    /// N: how many rows of each group are kept.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The schema of the rows the node ranks (what the map stage shuffles).
    pub fn row_schema(&self) -> SchemaRef {
        self.below.schema()
    }

    /// The schema of ranked rows: a row's columns, then its rank.
    pub fn ranked_schema(&self) -> SchemaRef {
        self.node.schema()
    }

    /// The schema of the query's output rows.
    pub fn output_schema(&self) -> SchemaRef {
        self.root.schema()
    }

    /// The group key's columns, as a state row holds them.
    pub fn key_fields(&self) -> Result<Vec<Field>, SqlError> {
        let schema = self.row_schema();
        self.partition_by
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let t = e.data_type(&schema).map_err(SqlError::from_planning)?;
                Ok(Field::new(format!("__sluice_key_{i}"), t, true))
            })
            .collect()
    }

    /// The group key column that is an event-time window, if one is: its
    /// index among the key columns, and how the window's end is found.
    pub fn window(&self) -> Option<(usize, WindowEnd)> {
        let schema = self.row_schema();
        self.partition_by.iter().enumerate().find_map(|(i, e)| {
            if e.data_type(&schema).ok()? == crate::window::window_type() {
                return Some((i, WindowEnd::Field));
            }
            crate::stateful::date_bin_stride(e).map(|ms| (i, WindowEnd::Plus(ms)))
        })
    }

    /// Map stage: the task's rows, through the plan below the node, in
    /// input order. Runs the input once; a second call is a bug.
    pub fn map(&self) -> Result<Output, SqlError> {
        let stream = crate::execute_in_order(self.below.clone(), self.ctx.task_ctx())?;
        Ok(Output {
            schema: self.row_schema(),
            stream,
            input: Some(self.stream.clone()),
        })
    }

    /// The group key of each of `rows`: one array per `PARTITION BY` term.
    pub fn keys(&self, rows: &RecordBatch) -> Result<Vec<ArrayRef>, SqlError> {
        self.partition_by
            .iter()
            .map(|e| {
                e.evaluate(rows)
                    .and_then(|v| v.into_array(rows.num_rows()))
                    .map_err(SqlError::from_execution)
            })
            .collect()
    }

    /// The ranks that `rows` change. `rows` are every kept row of some
    /// groups, then new rows, in arrival order; `kept[i]` is row `i`'s
    /// rank before, `None` for a new row. Returns each rank at most N
    /// whose row is not the one it had: the row's index and the rank, by
    /// group and rank.
    pub fn rank(
        &self,
        rows: &RecordBatch,
        kept: &[Option<u64>],
    ) -> Result<Vec<(u32, u64)>, SqlError> {
        let n = rows.num_rows();
        if kept.len() != n {
            return Err(unexpected("a rank for every row"));
        }
        let keys = self.keys(rows)?;
        let mut columns: Vec<SortColumn> = keys
            .iter()
            .map(|k| SortColumn {
                values: k.clone(),
                options: None,
            })
            .collect();
        for o in &self.order_by {
            columns.push(
                o.evaluate_to_sort_column(rows)
                    .map_err(SqlError::from_execution)?,
            );
        }
        let arrival: UInt32Array = (0..n as u32).collect();
        columns.push(SortColumn {
            values: Arc::new(arrival),
            options: None,
        });
        let order = lexsort_to_indices(&columns, None).map_err(|e| unexpected(&e.to_string()))?;
        let fields = keys
            .iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(|e| unexpected(&e.to_string()))?;
        let groups = converter
            .convert_columns(&keys)
            .map_err(|e| unexpected(&e.to_string()))?;
        let mut changed = Vec::new();
        let mut rank = 0u64;
        for (pos, &i) in order.values().iter().enumerate() {
            let first =
                pos == 0 || groups.row(i as usize) != groups.row(order.value(pos - 1) as usize);
            rank = if first { 1 } else { rank + 1 };
            if rank <= self.limit && kept[i as usize] != Some(rank) {
                changed.push((i, rank));
            }
        }
        Ok(changed)
    }

    /// `rows` with their ranks, as the window node emits them.
    pub fn ranked(&self, rows: &RecordBatch, ranks: UInt64Array) -> Result<RecordBatch, SqlError> {
        let mut columns = rows.columns().to_vec();
        columns.push(Arc::new(ranks));
        RecordBatch::try_new(self.ranked_schema(), columns)
            .map_err(|e| unexpected(&format!("ranked rows: {e}")))
    }

    /// The output rows of ranked rows: the rest of the query above the
    /// node (its `rn <= N`, its `SELECT`).
    pub async fn finish(&self, ranked: Vec<RecordBatch>) -> Result<Vec<RecordBatch>, SqlError> {
        let source = MemorySourceConfig::try_new_exec(&[ranked], self.ranked_schema(), None)
            .map_err(SqlError::from_planning)?;
        crate::run_above(&self.ctx, &self.root, &self.node, source).await
    }
}

fn unexpected(what: &str) -> SqlError {
    SqlError::Unsupported {
        construct: what.into(),
        reason: "an internal error of the top-N".into(),
    }
}

#[cfg(test)]
#[path = "top_n_tests.rs"]
mod tests;
