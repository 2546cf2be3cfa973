//! Where a top-N is in a physical plan: the window node over a stream,
//! and the filter on its rank above it that gives N.

use std::sync::Arc;

use arrow_schema::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as Op;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};

use crate::SqlError;

/// The largest N a top-N keeps per group.
pub const MAX_N: u64 = 10_000;

/// The window expressions of a window node.
pub(super) fn window_exprs(
    node: &Arc<dyn ExecutionPlan>,
) -> &[Arc<dyn datafusion::physical_expr::window::WindowExpr>] {
    match node.downcast_ref::<BoundedWindowAggExec>() {
        Some(w) => w.window_expr(),
        None => node
            .downcast_ref::<WindowAggExec>()
            .expect("a top-N's node is a window node")
            .window_expr(),
    }
}

/// The refusal of a window node that is not one `ROW_NUMBER()`.
pub(super) fn unsupported_window(node: &Arc<dyn ExecutionPlan>) -> SqlError {
    let names: Vec<&str> = window_exprs(node).iter().map(|w| w.name()).collect();
    unsupported(
        format!("the window functions {}", names.join(", ")),
        "over a stream, OVER runs only as a top-N: one ROW_NUMBER() filtered by its rank",
    )
}

/// The N of the top-N whose window node is `node`, from the filter on its
/// rank above it in `root`. A rank without such a filter, and a rank the
/// output drops while N > 1, are refused.
pub(super) fn limit(
    root: &Arc<dyn ExecutionPlan>,
    node: &Arc<dyn ExecutionPlan>,
    last: bool,
) -> Result<u64, SqlError> {
    let path = path_to(root, node).expect("the node is in the plan");
    let rank = node.schema().fields().len() - 1;
    let (limit, above) = limit_above(&path, rank)?;
    if last && limit > 1 && !reaches_output(&path[..=above], rank_at(&path, above, rank)) {
        return Err(unsupported(
            format!("a top-{limit} whose rank is not an output column"),
            "each output row replaces the row of its group and rank, so a top-N with N > 1 must select its ROW_NUMBER() column",
        ));
    }
    Ok(limit)
}

/// The nodes from `root` down to `target`, both included.
fn path_to(
    root: &Arc<dyn ExecutionPlan>,
    target: &Arc<dyn ExecutionPlan>,
) -> Option<Vec<Arc<dyn ExecutionPlan>>> {
    if Arc::ptr_eq(root, target) {
        return Some(vec![root.clone()]);
    }
    root.children().into_iter().find_map(|c| {
        let mut path = path_to(c, target)?;
        path.insert(0, root.clone());
        Some(path)
    })
}

/// The index in `parent`'s output of its child's column `i`, when
/// `parent` passes it through unchanged.
fn column_up(parent: &Arc<dyn ExecutionPlan>, i: usize) -> Option<usize> {
    if let Some(p) = parent.downcast_ref::<ProjectionExec>() {
        return p.expr().iter().position(|e| {
            e.expr
                .downcast_ref::<Column>()
                .is_some_and(|c| c.index() == i)
        });
    }
    if let Some(f) = parent.downcast_ref::<FilterExec>() {
        return match f.projection() {
            Some(p) => p.iter().position(|&j| j == i),
            None => Some(i),
        };
    }
    let child = parent.children().into_iter().next()?;
    (parent.children().len() == 1 && parent.schema() == child.schema()).then_some(i)
}

/// The index of the node's rank column in the output of `path[at]`
/// (`path` runs from the root down to the node, whose column `rank` is).
fn rank_at(path: &[Arc<dyn ExecutionPlan>], at: usize, rank: usize) -> Option<usize> {
    let mut i = rank;
    for node in path[at..path.len() - 1].iter().rev() {
        i = column_up(node, i)?;
    }
    Some(i)
}

/// Whether the column `i` of `path`'s last node reaches the root's output.
fn reaches_output(path: &[Arc<dyn ExecutionPlan>], i: Option<usize>) -> bool {
    let Some(mut i) = i else { return false };
    for node in path[..path.len() - 1].iter().rev() {
        match column_up(node, i) {
            Some(j) => i = j,
            None => return false,
        }
    }
    true
}

/// N, from the filter on the rank above the node, and that filter's
/// position in `path`. Between them only nodes that pass the rank through.
fn limit_above(path: &[Arc<dyn ExecutionPlan>], rank: usize) -> Result<(u64, usize), SqlError> {
    let missing = || {
        unsupported(
            "ROW_NUMBER() without a filter `rn <= N` on it",
            "a streaming query keeps the top N rows of each group: filter the ROW_NUMBER() column with `<= N`, `< N` or `= 1` right above it",
        )
    };
    let mut i = rank;
    for at in (0..path.len() - 1).rev() {
        let node = &path[at];
        if let Some(f) = node.downcast_ref::<FilterExec>() {
            let n = bound(f.predicate(), i).ok_or_else(missing)??;
            return Ok((n, at));
        }
        i = column_up(node, i).ok_or_else(missing)?;
    }
    Err(missing())
}

/// N of a predicate `rank <= N`, `rank < N`, `rank = 1` (or mirrored) on
/// column `rank`; `None` for any other predicate.
fn bound(predicate: &Arc<dyn PhysicalExpr>, rank: usize) -> Option<Result<u64, SqlError>> {
    let b = predicate.downcast_ref::<BinaryExpr>()?;
    let is_rank = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<Column>()
            .is_some_and(|c| c.index() == rank)
    };
    let value = |e: &Arc<dyn PhysicalExpr>| -> Option<i64> {
        match e
            .downcast_ref::<Literal>()?
            .value()
            .cast_to(&DataType::Int64)
            .ok()?
        {
            ScalarValue::Int64(Some(v)) => Some(v),
            _ => None,
        }
    };
    let (op, v) = match (is_rank(b.left()), is_rank(b.right())) {
        (true, false) => (*b.op(), value(b.right())?),
        (false, true) => (b.op().swap()?, value(b.left())?),
        _ => return None,
    };
    let n = match op {
        Op::LtEq => v,
        Op::Lt => v - 1,
        Op::Eq if v == 1 => 1,
        _ => return None,
    };
    Some(match n {
        n if n < 1 => Err(unsupported(
            format!("a top-N that keeps {n} rows"),
            "N must be at least 1",
        )),
        n if n as u64 > MAX_N => Err(unsupported(
            format!("a top-{n}"),
            "a top-N keeps at most 10000 rows of each group",
        )),
        n => Ok(n as u64),
    })
}

fn unsupported(construct: impl Into<String>, reason: &str) -> SqlError {
    SqlError::Unsupported {
        construct: construct.into(),
        reason: reason.into(),
    }
}
