//! What a query may do, checked on its logical plan before it
//! runs. Anything else is refused by name: no query may silently run with
//! different semantics than its SQL says.
//!
//! - One aggregation over the stream (`GROUP BY`, `SELECT DISTINCT`) is
//!   a stateful query; its aggregate functions are those whose state
//!   merges exactly. Window functions (`OVER`) are refused.
//! - Refused outright: `ORDER BY` and `LIMIT` (a stream has no order and
//!   no end), functions whose value is not fixed by their arguments
//!   (`now()`, `random()`, `uuid()`: a retried task must write the same
//!   bytes), recursive queries, `EXPLAIN`, a query that reads `input`
//!   more than once (a self-join, say) or never, and joins that would emit
//!   a static table's unmatched rows with every batch.

use datafusion::common::JoinType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};

use crate::{INPUT, SqlError};

/// The aggregate functions whose state merges exactly across batches.
const AGGREGATES: [&str; 6] = ["count", "sum", "min", "max", "avg", "approx_distinct"];

/// What the checked query keeps between batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The grouping key of the query's aggregation over the stream (every
    /// column of a `SELECT DISTINCT`); `None` for a stateless query.
    pub keys: Option<Vec<String>>,
    /// The column whose event-time window (`window`, `hop`, `date_bin`)
    /// the aggregation groups by, if it does.
    pub window: Option<String>,
}

/// Refuses the first construct of `plan` that Sluice does not run.
pub fn check(plan: &LogicalPlan) -> Result<Shape, SqlError> {
    let mut refused: Option<SqlError> = None;
    let mut input_reads = 0usize;
    let mut keys: Vec<Vec<String>> = Vec::new();
    let mut window = None;
    plan.apply_with_subqueries(|node| {
        let volatile = volatile_function(node)?;
        let found = match node {
            LogicalPlan::Aggregate(a) if reads_input(&a.input) => {
                keys.push(a.group_expr.iter().map(|e| e.schema_name().to_string()).collect());
                window = a.group_expr.iter().find_map(window_column);
                if a.group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))) {
                    Some(unsupported(
                        "GROUPING SETS, CUBE or ROLLUP",
                        "a streaming aggregation keeps one grouping",
                    ))
                } else {
                    aggregate_functions(&a.aggr_expr)?
                }
            }
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::On(_)) => Some(unsupported(
                "DISTINCT ON",
                "use SELECT DISTINCT or GROUP BY",
            )),
            LogicalPlan::Distinct(d) if reads_input(node) => {
                let schema = d.input().schema();
                keys.push(schema.fields().iter().map(|f| f.name().clone()).collect());
                None
            }
            LogicalPlan::Window(w) => {
                let names = function_names(&w.window_expr)?;
                Some(unsupported(
                    format!("the window function {}", names.join(", ")),
                    "it needs the rows of earlier batches in order; use GROUP BY window(...) for event-time windows",
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
    if input_reads == 0 {
        return Err(unsupported(
            "a query that does not read the stream `input`",
            "a streaming query's rows come from its input; select FROM input",
        ));
    }
    if input_reads > 1 {
        return Err(unsupported(
            "reading the stream `input` more than once (a self-join, or input in a UNION or subquery twice)",
            "each batch's input is read once; join the stream with static tables instead",
        ));
    }
    if keys.len() > 1 {
        return Err(unsupported(
            "more than one aggregation over the stream",
            "a streaming query keeps the state of one aggregation",
        ));
    }
    Ok(Shape {
        keys: keys.pop(),
        window,
    })
}

/// The column an event-time window key is over: `window(ts, ...)`,
/// `hop(ts, ...)` or `date_bin(stride, ts)`.
fn window_column(e: &Expr) -> Option<String> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    let arg = match f.func.name() {
        "window" | "hop" => f.args.first()?,
        "date_bin" => f.args.get(1)?,
        _ => return None,
    };
    match arg {
        Expr::Column(c) => Some(c.name.clone()),
        _ => None,
    }
}

/// The first aggregate call in `exprs` whose state does not merge exactly
/// across batches, refused by name.
fn aggregate_functions(exprs: &[Expr]) -> datafusion::common::Result<Option<SqlError>> {
    let mut refused = None;
    for e in exprs {
        e.apply(|e| {
            if let Expr::AggregateFunction(f) = e {
                let name = f.func.name().to_string();
                let distinct = f.params.distinct;
                if !AGGREGATES.contains(&name.as_str()) || (distinct && name != "count") {
                    let shown = if distinct { format!("{name}(DISTINCT ...)") } else { name };
                    refused = Some(unsupported(
                        format!("the aggregate function {shown}"),
                        "a streaming aggregation keeps count, sum, min, max, avg, count(DISTINCT ...) and approx_distinct, whose state merges exactly across batches",
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
                if !f.params.order_by.is_empty() {
                    refused = Some(unsupported(
                        format!("ORDER BY in the aggregate function {name}"),
                        "a stream has no order",
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if refused.is_some() {
            break;
        }
    }
    Ok(refused)
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
