//! A query's filter on the task's stream, handed to its source: the
//! conjuncts of the `WHERE` that DataFusion pushes into the scan, each
//! evaluated over the rows of its own columns, so that a source that can
//! (Parquet) decodes the other columns only for the rows kept.
//!
//! The plan keeps every filter (the pushdown is inexact): a source may
//! apply a conjunct, skip it, or keep every row of a batch whose
//! evaluation fails, and the query's answer is the same.

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr};

/// Whether a filter may be handed to a source: it is deterministic and
/// reads only the table's own columns.
pub(crate) fn pushable(filter: &Expr) -> bool {
    !filter.is_volatile() && !filter.contains_outer() && !has_subquery(filter)
}

fn has_subquery(filter: &Expr) -> bool {
    filter
        .exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
            ))
        })
        .unwrap_or(true)
}

/// The conjuncts of a scan's filters over a stream table, in order.
#[derive(Debug, Clone)]
pub struct RowFilter {
    conjuncts: Vec<Conjunct>,
}

/// One conjunct: its columns (in the table's order) and its expression
/// over them.
#[derive(Debug, Clone)]
pub struct Conjunct {
    schema: SchemaRef,
    expr: Arc<dyn PhysicalExpr>,
}

impl RowFilter {
    /// The filters of one scan of a table of `schema`; `None` when none
    /// can be evaluated apart from the plan.
    pub(crate) fn of(filters: &[Expr], schema: &SchemaRef) -> Option<RowFilter> {
        let conjuncts: Vec<Conjunct> = filters
            .iter()
            .filter(|f| pushable(f))
            .filter_map(|f| Conjunct::of(f, schema))
            .collect();
        (!conjuncts.is_empty()).then_some(RowFilter { conjuncts })
    }

    pub fn conjuncts(&self) -> &[Conjunct] {
        &self.conjuncts
    }
}

impl Conjunct {
    fn of(filter: &Expr, table: &SchemaRef) -> Option<Conjunct> {
        let filter = unqualified(filter.clone())?;
        let mut columns: Vec<usize> = filter
            .column_refs()
            .iter()
            .map(|c| table.index_of(&c.name).ok())
            .collect::<Option<_>>()?;
        if columns.is_empty() {
            return None;
        }
        columns.sort_unstable();
        let schema: SchemaRef = Arc::new(table.project(&columns).ok()?);
        let df = DFSchema::try_from(schema.as_ref().clone()).ok()?;
        let props = ExecutionProps::new();
        let ctx = PhysicalPlanningContext::default();
        let expr = create_physical_expr(&filter, &df, &props, &ctx).ok()?;
        Some(Conjunct { schema, expr })
    }

    /// The names of the columns the conjunct reads, in the table's order.
    pub fn columns(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// Which rows of `batch` (holding the conjunct's columns, by name)
    /// it keeps; `None` when it cannot say (the rows are then all kept,
    /// and the plan's filter decides).
    pub fn keeps(&self, batch: &RecordBatch) -> Option<BooleanArray> {
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|f| batch.column_by_name(f.name()).cloned())
            .collect::<Option<Vec<_>>>()?;
        let own = RecordBatch::try_new(self.schema.clone(), columns).ok()?;
        let value = self.expr.evaluate(&own).ok()?;
        let array = value.into_array(own.num_rows()).ok()?;
        let keep = array.as_any().downcast_ref::<BooleanArray>()?;
        // A NULL is not kept, as a WHERE keeps no row whose filter is NULL.
        Some(match keep.nulls() {
            None => keep.clone(),
            Some(_) => keep.iter().map(|k| Some(k == Some(true))).collect(),
        })
    }
}

/// `filter` with every column unqualified (the scan's table is the only
/// one it reads); `None` when it cannot be rewritten.
fn unqualified(filter: Expr) -> Option<Expr> {
    filter
        .transform(|e| match e {
            Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                c.name,
            )))),
            other => Ok(Transformed::no(other)),
        })
        .ok()
        .map(|t| t.data)
}
