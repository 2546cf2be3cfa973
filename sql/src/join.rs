//! A join of two streams, split into the two stages of a batch around
//! DataFusion's own hash join node.
//!
//! ```text
//!  map task (reads stream s): s's side of the join node ─► side rows ─► their key arrays
//!  reduce task: new rows of a side ⋈ the other side's (buffered + new) ─► matched pairs
//!               joined rows (the node's own output) ─► the rest of the plan ─► output
//!               an outer side's unmatched row, once evicted ─► padded with NULLs ─► the rest
//! ```
//!
//! The join node is the plan's hash join whose two inputs each read one
//! stream. The reduce runs a hash join with the node's own keys, filter
//! and null semantics over rows that carry an id each, so that it knows
//! which buffered rows matched. The node's join type only says which
//! sides keep their unmatched rows.
//!
//! Invariant (determinism): the hash join emits matches in the order of
//! its probe input, one partition, so the output is a pure function of the
//! rows given, in their order.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array, new_null_array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::common::JoinType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::{HashJoinExec, HashJoinExecBuilder, PartitionMode};
use datafusion::prelude::SessionContext;

use crate::bound::{Bound, bound_of};
use crate::graph::{Graph, Kind, Source};
use crate::input::SharedInput;
use crate::{Output, SqlError, Streams, Table};

/// The name of the id column a side's rows carry into [`StreamJoin::matches`].
pub const ID: &str = "__sluice_id";

/// The join of two streams of a planned query.
pub struct StreamJoin {
    ctx: SessionContext,
    root: Arc<dyn ExecutionPlan>,
    node: Arc<dyn ExecutionPlan>,
    /// The stream each input of the node reads: left, right.
    sides: [String; 2],
    bound: Option<Bound>,
    /// The task's input itself, for [`Output::read_rest`].
    stream: SharedInput,
}

impl std::fmt::Debug for StreamJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamJoin")
            .field("sides", &self.sides)
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// What the driver checks of a query's join of two streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinInfo {
    /// The stream each input of the join reads: left, right.
    pub streams: [String; 2],
    /// Whether each input's unmatched rows are emitted (an outer join).
    pub outer: [bool; 2],
    /// The event-time bound, with the name of each input's time column.
    pub bound: Option<(Bound, [String; 2])>,
    /// Whether each input's time column is the end (or later) of the
    /// window of the aggregation feeding that input, which the watermark
    /// closes as it closes a stream's event time.
    pub window_end: [bool; 2],
}

/// The join of `graph`'s operator `i`, described.
pub(crate) fn info(graph: &Graph, i: usize) -> Result<JoinInfo, SqlError> {
    let join = StreamJoin::of(graph, i)?;
    let node = hash_join(&join.node);
    let name = |side: usize, c: usize| join.node.children()[side].schema().field(c).name().clone();
    let window_end = match join.bound {
        Some(b) => [
            crate::lineage::window_end_or_later(graph, i, 0, b.left),
            crate::lineage::window_end_or_later(graph, i, 1, b.right),
        ],
        None => [false, false],
    };
    Ok(JoinInfo {
        outer: outer(node.join_type()),
        bound: join.bound.map(|b| (b, [name(0, b.left), name(1, b.right)])),
        streams: join.sides,
        window_end,
    })
}

/// Whether each side's unmatched rows are emitted, for a join of `kind`.
fn outer(kind: &JoinType) -> [bool; 2] {
    match kind {
        JoinType::Left => [true, false],
        JoinType::Right => [false, true],
        JoinType::Full => [true, true],
        _ => [false, false],
    }
}

/// The pairs one run of the join matched.
#[derive(Debug)]
pub struct Matches {
    /// The joined rows, in the node's join schema (left columns, then
    /// right columns).
    pub joined: Vec<RecordBatch>,
    /// The id of each pair's left row, and of its right row.
    pub left_ids: Vec<u64>,
    pub right_ids: Vec<u64>,
    /// The joined rows' bytes, reserved in the task's memory pool while
    /// these are held.
    _held: MemoryReservation,
}

impl StreamJoin {
    /// Plans `sql` over `streams` and the static `tables` within `limits`:
    /// its last join of two streams; `None` when it joins no two streams.
    pub async fn plan(
        sql: &str,
        streams: impl Into<Streams>,
        input: impl Into<crate::TaskInput>,
        tables: &[Table],
        limits: impl Into<crate::RunLimits>,
    ) -> Result<Option<Self>, SqlError> {
        let last = (Kind::Join, Self::of as crate::graph::Of<Self>);
        Graph::last_of(sql, streams, input, tables, limits, last).await
    }

    /// The join that is operator `i` of `graph`. A join of two streams
    /// that is not a hash join (no equal keys) is refused.
    pub fn of(graph: &Graph, i: usize) -> Result<Self, SqlError> {
        let node = graph.node(i).clone();
        let sides: Vec<String> = graph
            .sources(i)
            .iter()
            .map(|s| match s {
                Source::Streams(names) => names.join(" and "),
                Source::Operator(j) => format!("the output of operator {j}"),
            })
            .collect();
        let sides: [String; 2] = sides
            .try_into()
            .map_err(|_| unexpected("a join without two sides"))?;
        let Some(join) = node.downcast_ref::<HashJoinExec>() else {
            return Err(SqlError::Unsupported {
                construct: format!("a join of `{}` and `{}` without equal keys", sides[0], sides[1]),
                reason: "a stream-stream join matches rows by equal keys: join ON a column of one equal to a column of the other".into(),
            });
        };
        Ok(StreamJoin {
            bound: bound_of(join),
            ctx: graph.ctx(),
            root: graph.above(i),
            node,
            sides,
            stream: graph.input(),
        })
    }

    /// The stream each input of the join reads: left, right.
    pub fn sides(&self) -> &[String; 2] {
        &self.sides
    }

    /// The event-time bound of the join's condition, if it has one.
    pub fn bound(&self) -> Option<Bound> {
        self.bound
    }

    /// Whether the unmatched rows of each side (left, right) are emitted,
    /// padded with NULLs.
    pub fn outer(&self) -> [bool; 2] {
        outer(hash_join(&self.node).join_type())
    }

    /// The schema of side `side`'s rows (0: left, 1: right).
    pub fn side_schema(&self, side: usize) -> SchemaRef {
        self.node.children()[side].schema()
    }

    /// The schema of the rows the join node makes: the left columns, then
    /// the right ones.
    pub fn join_schema(&self) -> SchemaRef {
        hash_join(&self.node).join_schema().clone()
    }

    /// The schema of the query's output rows.
    pub fn output_schema(&self) -> SchemaRef {
        self.root.schema()
    }

    /// Map stage: the task's rows of side `side`, through the plan below
    /// the join. Runs the input once; a second call is a bug.
    pub fn map(&self, side: usize) -> Result<Output, SqlError> {
        let below = self.node.children()[side].clone();
        let schema = below.schema();
        let stream = crate::execute_in_order(below, self.ctx.task_ctx())?;
        Ok(Output {
            schema,
            stream,
            input: Some(self.stream.clone()),
        })
    }

    /// The join key of each row of `rows`, side `side`'s: one array per
    /// key column of the join's condition.
    pub fn keys(&self, side: usize, rows: &RecordBatch) -> Result<Vec<ArrayRef>, SqlError> {
        hash_join(&self.node)
            .on()
            .iter()
            .map(|(l, r)| {
                let expr = if side == 0 { l } else { r };
                expr.evaluate(rows)
                    .and_then(|v| v.into_array(rows.num_rows()))
                    .map_err(SqlError::from_execution)
            })
            .collect()
    }

    /// The pairs of `left` and `right` rows that the join's condition
    /// matches. Each row carries its id as a last column, [`ID`].
    pub async fn matches(
        &self,
        left: Vec<RecordBatch>,
        right: Vec<RecordBatch>,
    ) -> Result<Matches, SqlError> {
        let join = hash_join(&self.node);
        let with_id = |side: usize| with_id(&self.side_schema(side));
        let (left_rows, right_rows) = (rows(&left), rows(&right));
        // Each side is read a slice at a time, yielding between slices,
        // each slice of the probe side compared with the build side in a
        // bounded number of pairs: a probe that matches many rows per key
        // is cancellable and leaves the executor's threads to other tasks
        // (collect.rs).
        let slice = crate::collect::join_slice_rows(left_rows.min(right_rows));
        let l = crate::collect::yielding_input(with_id(0), left, slice)?;
        let r = crate::collect::yielding_input(with_id(1), right, slice)?;
        let built = HashJoinExecBuilder::new(l, r, join.on().to_vec(), JoinType::Inner)
            .with_filter(join.filter().cloned())
            .with_null_equality(join.null_equality())
            .with_partition_mode(PartitionMode::CollectLeft)
            .build()
            .map_err(SqlError::from_planning)?;
        // The hash table is built on the left: on the smaller side, the
        // new rows of a batch rather than the kept ones. The swapped join
        // restores the column order; which side builds is a function of
        // the row counts, so a retry matches in the same order.
        let inner: Arc<dyn ExecutionPlan> = if left_rows > right_rows {
            built
                .swap_inputs(PartitionMode::CollectLeft)
                .map_err(SqlError::from_planning)?
        } else {
            Arc::new(built)
        };
        let pairs =
            crate::collect::collect_within(inner, self.ctx.task_ctx(), "stream join output")
                .await?;
        let width = self.side_schema(0).fields().len();
        let schema = self.join_schema();
        let mut out = Matches {
            joined: Vec::with_capacity(pairs.batches.len()),
            left_ids: Vec::new(),
            right_ids: Vec::new(),
            _held: pairs.reservation,
        };
        for p in pairs.batches {
            let ids = |i: usize| -> Result<Vec<u64>, SqlError> {
                let a = p.column(i).as_any().downcast_ref::<UInt64Array>();
                let a = a.ok_or_else(|| unexpected("an id column that is not UInt64"))?;
                Ok(a.values().to_vec())
            };
            let last = p.num_columns() - 1;
            out.left_ids.extend(ids(width)?);
            out.right_ids.extend(ids(last)?);
            let columns: Vec<ArrayRef> = (0..last)
                .filter(|&i| i != width)
                .map(|i| p.column(i).clone())
                .collect();
            let joined = RecordBatch::try_new(schema.clone(), columns)
                .map_err(|e| unexpected(&format!("joined rows: {e}")))?;
            out.joined.push(joined);
        }
        Ok(out)
    }

    /// Rows of side `side` that matched nothing, as the join emits them:
    /// the other side's columns NULL.
    pub fn padded(&self, side: usize, rows: &RecordBatch) -> Result<RecordBatch, SqlError> {
        let schema = self.join_schema();
        let width = self.side_schema(0).fields().len();
        let n = rows.num_rows();
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match (side, i < width) {
                (0, true) => rows.column(i).clone(),
                (1, false) => rows.column(i - width).clone(),
                _ => new_null_array(f.data_type(), n),
            })
            .collect();
        RecordBatch::try_new(schema, columns).map_err(|e| unexpected(&format!("padded rows: {e}")))
    }

    /// The output rows of joined rows (in the join schema): the node's
    /// own projection, then the rest of the query.
    pub async fn finish(&self, joined: Vec<RecordBatch>) -> Result<Vec<RecordBatch>, SqlError> {
        let join = hash_join(&self.node);
        let rows = match join.projection.as_deref() {
            Some(p) => joined
                .iter()
                .map(|b| b.project(p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| unexpected(&format!("projected rows: {e}")))?,
            None => joined,
        };
        let source = MemorySourceConfig::try_new_exec(&[rows], self.node.schema(), None)
            .map_err(SqlError::from_planning)?;
        crate::run_above(&self.ctx, &self.root, &self.node, source).await
    }
}

/// The rows of `batches`.
fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// `schema` with the id column last.
fn with_id(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(ID, DataType::UInt64, false)));
    Arc::new(Schema::new(fields))
}

/// The join node of an operator, as what it is.
fn hash_join(node: &Arc<dyn ExecutionPlan>) -> &HashJoinExec {
    node.downcast_ref::<HashJoinExec>()
        .expect("a stream join's node is a hash join")
}

fn unexpected(what: &str) -> SqlError {
    SqlError::Unsupported {
        construct: what.into(),
        reason: "an internal error of the stream join".into(),
    }
}
