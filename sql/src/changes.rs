//! Changes: how an aggregation without a window feeds another one in
//! update and complete modes.
//!
//! ```text
//!  upstream U (reduce):   state rows before the batch (O), after (M) of its touched groups
//!                         O ─► final ─► [the fragment beneath D's Partial] ─► rows, diff -1
//!                         M ─► final ─► [the fragment beneath D's Partial] ─► rows, diff +1
//!  downstream D (reduce): the multiset of its input rows (row ─► count), each batch's diffs
//!                         applied; the groups a diff touched ─► D's aggregates over their
//!                         rows (each repeated by its count) ─► [the rest of the query]
//! ```
//!
//! U's groups change with every batch, so D cannot merge them as partial
//! rows: a `max` per auction rises, and the `avg` over the maxima must
//! drop the old maximum and take the new one. D keeps its input rows
//! (not partial states) and recomputes a touched group from them, so any
//! aggregate retracts, `max` and `count(DISTINCT ..)` included.
//!
//! Invariant: what U retracts is what it added. A group's old row is its
//! state row before the batch, whose final value U emitted (+1) in the
//! batch that wrote it; the fragment between U and D is a pure function of
//! a row, so the same row reaches D with -1.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::collect;

use super::Aggregation;
use crate::SqlError;

/// The column of a change that says whether its row is added (+1) or
/// retracted (-1).
pub const DIFF: &str = "__sluice_diff";

impl Aggregation {
    /// Whether its output feeds another aggregation, which can read its
    /// changes.
    pub fn feeds_aggregation(&self) -> bool {
        self.changes_root.is_some()
    }

    /// The schema of the changes it emits: the input rows of the
    /// aggregation it feeds, then [`DIFF`].
    pub fn changes_schema(&self) -> Result<SchemaRef, SqlError> {
        Ok(with_diff(&self.changes_root()?.schema()))
    }

    /// The changes of one batch: the final values of `old` (state rows
    /// before the batch, of the groups it changed) retracted, then those
    /// of `new` (the same groups after it, and the new ones) added; each
    /// through the fragment that feeds the next aggregation.
    pub async fn changes(
        &self,
        old: RecordBatch,
        new: RecordBatch,
    ) -> Result<Vec<RecordBatch>, SqlError> {
        let root = self.changes_root()?;
        let schema = with_diff(&root.schema());
        let mut out = Vec::new();
        for (rows, diff) in [(old, -1), (new, 1)] {
            if rows.num_rows() == 0 {
                continue;
            }
            let last = self.over_partials(AggregateMode::Final, vec![rows])?;
            for b in crate::run_above(&self.ctx, &root, &self.node, last).await? {
                let mut columns = b.columns().to_vec();
                columns.push(Arc::new(Int64Array::from_value(diff, b.num_rows())));
                out.push(RecordBatch::try_new(schema.clone(), columns).map_err(arrow)?);
            }
        }
        Ok(out)
    }

    /// The schema of the rows it reads, before its partial aggregation.
    pub fn input_rows_schema(&self) -> SchemaRef {
        self.input.schema()
    }

    /// The group key of each of `rows` (input rows, with any columns
    /// after them): one array per key column.
    pub fn group_of(&self, rows: &RecordBatch) -> Result<Vec<ArrayRef>, SqlError> {
        self.group_by
            .expr()
            .iter()
            .map(|(e, _)| {
                e.evaluate(rows)
                    .and_then(|v| v.into_array(rows.num_rows()))
                    .map_err(SqlError::from_execution)
            })
            .collect()
    }

    /// The output rows of the groups of `rows` (input rows): its
    /// aggregates over them, through the rest of the query.
    pub async fn aggregate(&self, rows: Vec<RecordBatch>) -> Result<Vec<RecordBatch>, SqlError> {
        let schema = self.input.schema();
        let source = MemorySourceConfig::try_new_exec(&[rows], schema.clone(), None)
            .map_err(SqlError::from_planning)?;
        let single = AggregateExec::try_new(
            AggregateMode::Single,
            self.group_by.clone(),
            self.aggr_expr.clone(),
            self.filter_expr.clone(),
            source,
            schema,
        )
        .map_err(SqlError::from_planning)?;
        crate::run_above(&self.ctx, &self.root, &self.node, Arc::new(single)).await
    }

    /// The output rows of groups left with no input rows, one per row of
    /// `emptied` (input rows, one of each group): each group's aggregates
    /// over no rows (`count` 0, `sum`, `max` and `avg` NULL), through the
    /// rest of the query. An update-mode reader's latest row of the group
    /// then says it is empty.
    pub async fn aggregate_emptied(
        &self,
        emptied: &RecordBatch,
    ) -> Result<Vec<RecordBatch>, SqlError> {
        let n = emptied.num_rows();
        if n == 0 {
            return Ok(Vec::new());
        }
        // The aggregates' states over no rows: a Partial aggregation
        // without groups emits its one row even over no input.
        let schema = self.input.schema();
        let source = MemorySourceConfig::try_new_exec(&[vec![]], schema.clone(), None)
            .map_err(SqlError::from_planning)?;
        let partial = AggregateExec::try_new(
            AggregateMode::Partial,
            Arc::new(PhysicalGroupBy::new_single(vec![])),
            self.aggr_expr.clone(),
            self.filter_expr.clone(),
            source,
            schema,
        )
        .map_err(SqlError::from_planning)?;
        let states = collect(Arc::new(partial), self.ctx.task_ctx())
            .await
            .map_err(SqlError::from_execution)?;
        let states = match states.as_slice() {
            [one] if one.num_rows() == 1 => one.clone(),
            _ => {
                return Err(SqlError::Execution(
                    "an aggregation over no rows did not give one row of states".into(),
                ));
            }
        };
        let repeat = UInt32Array::from(vec![0; n]);
        let mut columns = self.group_of(emptied)?;
        for state in states.columns() {
            columns.push(datafusion::arrow::compute::take(state, &repeat, None).map_err(arrow)?);
        }
        let rows = RecordBatch::try_new(self.partial.clone(), columns).map_err(arrow)?;
        self.finish(vec![rows]).await
    }

    fn changes_root(&self) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, SqlError> {
        self.changes_root
            .clone()
            .ok_or_else(|| SqlError::Unsupported {
                construct: "changes of an aggregation that feeds no aggregation".into(),
                reason: "only an aggregation reads another's changes".into(),
            })
    }
}

/// `schema` with [`DIFF`] after its columns.
pub fn with_diff(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(DIFF, DataType::Int64, false)));
    Arc::new(Schema::new(fields))
}

fn arrow(e: arrow_schema::ArrowError) -> SqlError {
    SqlError::Execution(e.to_string())
}
