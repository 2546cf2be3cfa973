//! The check of every window call of a query before it runs: the size
//! and slide of `window`/`hop`, the gap of `session_window`.
//!
//! Each length is a constant of a fixed length (see
//! [`crate::window_length`]), and a whole number of milliseconds (a
//! fraction would be dropped at run time). A slide is at most its size,
//! and puts one row in at most [`MAX_WINDOWS_PER_ROW`] sliding windows:
//! beyond that, the expansion would take the memory of a task for a
//! handful of rows.
//!
//! [`check`] refuses a call of the logical plan, naming it and the bad
//! argument, before any task runs; the functions read their lengths at
//! run time with the same words ([`crate::window_length::millis`]).

use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

use crate::SqlError;
use crate::window_length::{EXAMPLE, length, shown};

/// The most sliding windows one row may be in: `size / slide`.
pub const MAX_WINDOWS_PER_ROW: i64 = 10_000;

/// Refuses the first call of `window`, `hop` or `session_window` in `plan`
/// (its subqueries included) whose lengths are not constant fixed
/// lengths, whose slide is longer than its size, or that puts a row in
/// more than [`MAX_WINDOWS_PER_ROW`] windows; the error names the call and
/// the argument.
pub(crate) fn check(plan: &LogicalPlan) -> Result<(), SqlError> {
    let mut refused = None;
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarFunction(f) = e
                    && let Err(why) = call(f)
                {
                    refused = Some(SqlError::Invalid(format!("{}: {why}", render(f))));
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(match refused {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })
    .map_err(SqlError::from_planning)?;
    refused.map_or(Ok(()), Err)
}

/// Why the call `f` cannot run, if it is a window call that cannot.
fn call(f: &ScalarFunction) -> Result<(), String> {
    let names: &[&str] = match f.func.name() {
        "window" | "hop" => &["size", "slide"],
        crate::session_window::NAME => &["gap"],
        _ => return Ok(()),
    };
    let mut lengths = Vec::with_capacity(names.len());
    for (arg, what) in f.args.iter().skip(1).zip(names) {
        let (ms, whole) = argument(arg)
            .and_then(|v| length(&v))
            .map_err(|why| format!("the {what} {why}"))?;
        if !whole {
            return Err(format!(
                "the {what} {} is not a whole number of milliseconds, the resolution of event time",
                render_arg(arg)
            ));
        }
        lengths.push(ms);
    }
    if let [size, slide] = lengths[..] {
        if slide > size {
            return Err(format!(
                "the slide ({slide} ms) is longer than the size ({size} ms); a slide at most the size puts each row in a window"
            ));
        }
        let windows = (size + slide - 1) / slide;
        if windows > MAX_WINDOWS_PER_ROW {
            return Err(format!(
                "size / slide = {} windows per row, above the cap of {} (a row is counted in every window that holds it); use a longer slide or a shorter size",
                thousands(windows),
                thousands(MAX_WINDOWS_PER_ROW)
            ));
        }
    }
    Ok(())
}

/// The constant value of a length argument: a literal, or an expression
/// of literals alone (`CAST('10 seconds' AS INTERVAL)`), folded.
fn argument(arg: &Expr) -> Result<ScalarValue, String> {
    let not_constant = || {
        format!(
            "{} must be a constant interval {EXAMPLE}, the same for every row",
            render_arg(arg)
        )
    };
    if !arg.column_refs().is_empty() {
        return Err(not_constant());
    }
    let folded = ExprSimplifier::new(SimplifyContext::default())
        .simplify(arg.clone())
        .map_err(|_| not_constant())?;
    match folded {
        Expr::Literal(v, _) => Ok(v),
        _ => Err(not_constant()),
    }
}

/// A call as a user reads it: `window(ts, '1 day', '1 millisecond')`.
fn render(f: &ScalarFunction) -> String {
    let args: Vec<String> = f.args.iter().map(render_arg).collect();
    format!("{}({})", f.func.name(), args.join(", "))
}

fn render_arg(e: &Expr) -> String {
    match e {
        Expr::Column(c) => c.name.clone(),
        Expr::Literal(v, _) => shown(v),
        other => other.human_display().to_string(),
    }
}

/// `10000` as `10,000`.
fn thousands(n: i64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "window_check_tests.rs"]
mod tests;
