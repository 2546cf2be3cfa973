//! Event-time window keys in a logical plan: the column a window groups
//! by, and where `session_window` may appear (a `GROUP BY` over a stream,
//! where the reduce stage merges sessions).

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};

use crate::SqlError;

/// The column an event-time window key is over: `window(ts, ...)`,
/// `hop(ts, ...)`, `session_window(ts, gap)` or `date_bin(stride, ts)`.
pub(super) fn window_column(e: &Expr) -> Option<String> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    let arg = match f.func.name() {
        "window" | "hop" | crate::session_window::NAME => f.args.first()?,
        "date_bin" => f.args.get(1)?,
        _ => return None,
    };
    match arg {
        Expr::Column(c) => Some(c.name.clone()),
        _ => None,
    }
}

/// Whether `e` is a `session_window(..)` call.
pub(super) fn is_session(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.func.name() == crate::session_window::NAME)
}

/// The refusal of a `session_window` anywhere but a `GROUP BY`, where the
/// reduce stage merges sessions; elsewhere it would be only a row's own
/// session.
pub(super) fn session_outside_group_by(
    node: &LogicalPlan,
) -> datafusion::common::Result<Option<SqlError>> {
    let exprs = match node {
        LogicalPlan::Aggregate(a) => a.aggr_expr.clone(),
        _ => node.expressions(),
    };
    Ok(calls_session(&exprs)?.then(session_refused))
}

pub(super) fn session_refused() -> SqlError {
    SqlError::Unsupported {
        construct: "session_window outside the GROUP BY of an aggregation over a stream".into(),
        reason: "sessions are merged by a streaming aggregation: group by session_window(ts, gap)"
            .into(),
    }
}

/// Whether any of `exprs` calls `session_window`.
pub(super) fn calls_session(exprs: &[Expr]) -> datafusion::common::Result<bool> {
    let mut found = false;
    for e in exprs {
        e.apply(|e| {
            found |= is_session(e);
            Ok(match found {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        })?;
    }
    Ok(found)
}
