//! What a window's length may be, and the check of every window call of a
//! query before it runs: the size and slide of `window`/`hop`, the gap of
//! `session_window`.
//!
//! A length is a constant interval of a fixed length, a positive whole
//! number of milliseconds (the resolution of event time): `'10 seconds'`,
//! `INTERVAL '1' MINUTE`. Months and years vary in length and are refused;
//! so is a slide that would put one row in more than
//! [`MAX_WINDOWS_PER_ROW`] sliding windows, whose expansion would take the
//! memory of a task for a handful of rows.
//!
//! [`check`] refuses a call of the logical plan, naming it and the bad
//! argument, before any task runs; [`millis`] is what the functions
//! themselves read at run time, with the same words.

use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

use crate::SqlError;

/// The most sliding windows one row may be in: `size / slide`.
pub const MAX_WINDOWS_PER_ROW: i64 = 10_000;

/// A fixed-length example for messages.
const EXAMPLE: &str = "such as '10 seconds'";

/// The length of an interval value in milliseconds, and whether it is a
/// whole number of them; or why it is no window length. The milliseconds
/// are the days' and the nanoseconds' (truncated), as the window functions
/// have always counted them.
pub(crate) fn length(v: &ScalarValue) -> Result<(i64, bool), String> {
    let (months, days, nanos) = match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => {
            if s.trim().is_empty() {
                return Err(format!("{} is empty: give an interval {EXAMPLE}", shown(v)));
            }
            let i = arrow_cast::parse::parse_interval_month_day_nano(s)
                .map_err(|e| format!("{} is not an interval {EXAMPLE}: {e}", shown(v)))?;
            (i.months, i.days, i.nanoseconds)
        }
        ScalarValue::IntervalMonthDayNano(Some(i)) => (i.months, i.days, i.nanoseconds),
        ScalarValue::IntervalDayTime(Some(i)) => (0, i.days, i64::from(i.milliseconds) * 1_000_000),
        ScalarValue::IntervalYearMonth(Some(m)) => (*m, 0, 0),
        other => return Err(format!("{} is not an interval {EXAMPLE}", shown(other))),
    };
    if months != 0 {
        return Err(format!(
            "{} must be a positive fixed length {EXAMPLE}; months and years vary in length",
            shown(v)
        ));
    }
    let ms = i64::from(days) * 86_400_000 + nanos / 1_000_000;
    let total = i128::from(days) * 86_400_000_000_000 + i128::from(nanos);
    if ms <= 0 && total > 0 {
        return Err(format!(
            "{} is below the 1 millisecond resolution of event time",
            shown(v)
        ));
    }
    if ms <= 0 {
        return Err(format!(
            "{} must be a positive fixed length {EXAMPLE}",
            shown(v)
        ));
    }
    Ok((ms, nanos % 1_000_000 == 0))
}

/// A value as a user wrote it: a string in quotes.
fn shown(v: &ScalarValue) -> String {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => format!("'{s}'"),
        other => other.to_string(),
    }
}

/// The length in milliseconds of the argument `arg` of the window function
/// `name`, as it reads it at run time (a constant, see [`length`]).
pub(crate) fn millis(
    arg: &datafusion::logical_expr::ColumnarValue,
    name: &str,
) -> datafusion::common::Result<i64> {
    use datafusion::logical_expr::ColumnarValue;
    let ColumnarValue::Scalar(v) = arg else {
        return datafusion::common::exec_err!(
            "{name}: a window length must be a constant interval {EXAMPLE}"
        );
    };
    length(v)
        .map(|(ms, _)| ms)
        .map_err(|why| datafusion::error::DataFusionError::Execution(format!("{name}: {why}")))
}

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
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "window_check_tests.rs"]
mod tests;
