//! What a stateless query may do, checked on its logical plan before it
//! runs. Anything else is refused by name: no query may silently run with
//! different semantics than its SQL says.
//!
//! - Refused until stateful queries exist: aggregates and `GROUP BY`,
//!   `DISTINCT`, window functions (they need state across batches).
//! - Refused outright: `ORDER BY` and `LIMIT` (a stream has no order and
//!   no end), functions whose value is not fixed by their arguments
//!   (`now()`, `random()`, `uuid()`: a retried task must write the same
//!   bytes), recursive queries, `EXPLAIN`, a query that reads `input`
//!   more than once (a self-join, say), and joins that would emit a static
//!   table's unmatched rows with every batch.

use datafusion::common::JoinType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};

use crate::{INPUT, SqlError};

const STATEFUL: &str = "it needs state across batches, which stateless queries do not keep";

/// Refuses the first construct of `plan` that Sluice does not run.
pub fn check(plan: &LogicalPlan) -> Result<(), SqlError> {
    let mut refused: Option<SqlError> = None;
    let mut input_reads = 0usize;
    plan.apply_with_subqueries(|node| {
        let volatile = volatile_function(node)?;
        let found = match node {
            LogicalPlan::Aggregate(a) => {
                let names = function_names(&a.aggr_expr)?;
                let construct = match (a.group_expr.is_empty(), names.is_empty()) {
                    (false, true) => "GROUP BY".to_string(),
                    (_, false) => format!("the aggregate function {}", names.join(", ")),
                    (true, true) => "an aggregation".to_string(),
                };
                Some(unsupported(construct, STATEFUL))
            }
            LogicalPlan::Distinct(_) => Some(unsupported("DISTINCT", STATEFUL)),
            LogicalPlan::Window(w) => {
                let names = function_names(&w.window_expr)?;
                Some(unsupported(
                    format!("the window function {}", names.join(", ")),
                    STATEFUL,
                ))
            }
            LogicalPlan::Sort(_) => Some(unsupported(
                "ORDER BY",
                "a stream has no order; sort the output where it is read",
            )),
            LogicalPlan::Limit(_) => Some(unsupported(
                "LIMIT",
                "a stream has no end; filter with WHERE instead",
            )),
            LogicalPlan::RecursiveQuery(_) => Some(unsupported(
                "a recursive query",
                "it cannot run over a stream",
            )),
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => Some(unsupported(
                "EXPLAIN",
                "a streaming query must produce rows",
            )),
            LogicalPlan::Join(j) => join(j.join_type, reads_input(&j.left), reads_input(&j.right)),
            _ if volatile.is_some() => {
                let name = volatile.unwrap_or_default();
                Some(unsupported(
                    format!("the function {name}"),
                    "its value depends on when or where a task runs, so a retried task would write different rows",
                ))
            }
            LogicalPlan::TableScan(t) if t.table_name.table() == INPUT => {
                input_reads += 1;
                None
            }
            _ => None,
        };
        match found {
            Some(e) => {
                refused = Some(e);
                Ok(TreeNodeRecursion::Stop)
            }
            None => Ok(TreeNodeRecursion::Continue),
        }
    })
    .map_err(SqlError::from_planning)?;
    if let Some(e) = refused {
        return Err(e);
    }
    if input_reads > 1 {
        return Err(unsupported(
            "reading the stream `input` more than once (a self-join, or input in a UNION or subquery twice)",
            "each batch's input is read once; join the stream with static tables instead",
        ));
    }
    Ok(())
}

/// A join of the stream with a static table is supported when every row
/// it emits comes from a row of the stream: an inner or cross join, or an
/// outer, semi or anti join that keeps the stream's side.
fn join(kind: JoinType, left_input: bool, right_input: bool) -> Option<SqlError> {
    use JoinType as J;
    if left_input && right_input {
        return Some(unsupported(
            "a join of the stream with itself",
            "each batch's input is read once; join the stream with static tables instead",
        ));
    }
    let keeps_stream = match kind {
        J::Inner => true,
        J::Left | J::LeftSemi | J::LeftAnti | J::LeftMark => left_input,
        J::Right | J::RightSemi | J::RightAnti | J::RightMark => right_input,
        J::Full => false,
    };
    (!keeps_stream && (left_input || right_input)).then(|| {
        unsupported(
            format!("a {kind} join that keeps the static table's side"),
            "it would emit the static table's unmatched rows with every batch",
        )
    })
}

/// The first function in `node`'s expressions whose result is not fixed
/// by its arguments (`now()`, `random()`, `uuid()`): a task must be a pure
/// function of its input.
fn volatile_function(node: &LogicalPlan) -> datafusion::common::Result<Option<String>> {
    let mut found = None;
    node.apply_expressions(|e| {
        e.apply(|e| {
            if let Expr::ScalarFunction(f) = e
                && f.func.signature().volatility != Volatility::Immutable
            {
                found = Some(f.func.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
    })?;
    Ok(found)
}

/// The names of the aggregate and window functions that `exprs` call.
fn function_names(exprs: &[Expr]) -> datafusion::common::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in exprs {
        e.apply(|e| {
            match e {
                Expr::AggregateFunction(f) => names.push(f.func.name().to_string()),
                Expr::WindowFunction(f) => names.push(f.fun.name().to_string()),
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    Ok(names)
}

fn reads_input(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|n| {
        if let LogicalPlan::TableScan(t) = n
            && t.table_name.table() == INPUT
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

fn unsupported(construct: impl Into<String>, reason: &str) -> SqlError {
    SqlError::Unsupported {
        construct: construct.into(),
        reason: reason.into(),
    }
}
