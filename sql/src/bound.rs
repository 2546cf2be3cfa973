//! The event-time bound of a stream join's condition: how far apart in
//! time a left row and a right row can be and still match, read off the
//! conjuncts of the join's filter that compare a left column with a right
//! column plus or minus an interval.
//!
//! ```text
//!  r.ts BETWEEN l.ts - INTERVAL '5' SECOND AND l.ts + INTERVAL '10' SECOND
//!    = r.ts >= l.ts - 5 s AND r.ts <= l.ts + 10 s
//!    ─► Bound { left: ts, right: ts, lower: -5000, upper: 10000 }   (r - l in [lower, upper])
//! ```
//!
//! Only conjuncts of the filter count, so a bound read here is implied by
//! the condition: evicting by it never drops a row that could still match.
//! A strict comparison counts as its non-strict form, which keeps rows a
//! millisecond longer.

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::joins::HashJoinExec;

/// `right - left` of two time columns lies in `[lower_ms, upper_ms]`
/// (either end may be open) for every pair the join matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The time column's index in the left input's rows.
    pub left: usize,
    /// The time column's index in the right input's rows.
    pub right: usize,
    pub lower_ms: Option<i64>,
    pub upper_ms: Option<i64>,
}

/// A column of one side, plus a constant, in milliseconds.
type Term = (Option<(usize, usize)>, i64);

/// The bound of `join`'s filter, if its conjuncts give one.
pub fn bound_of(join: &HashJoinExec) -> Option<Bound> {
    let filter = join.filter()?;
    let columns = filter.column_indices();
    let mut bound: Option<Bound> = None;
    for c in conjuncts(filter.expression()) {
        let Some(b) = BinaryExpr::downcast(c) else {
            continue;
        };
        let (Some(l), Some(r)) = (term(b.left(), columns), term(b.right(), columns)) else {
            continue;
        };
        let Some(found) = compare(l, *b.op(), r) else {
            continue;
        };
        bound = Some(match bound {
            None => found,
            Some(b) if (b.left, b.right) == (found.left, found.right) => Bound {
                lower_ms: max(b.lower_ms, found.lower_ms),
                upper_ms: min(b.upper_ms, found.upper_ms),
                ..b
            },
            Some(b) => b,
        });
    }
    bound
}

fn max(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `l op r`, with one term a left column and the other a right column, as
/// a bound on `right - left`.
fn compare(l: Term, op: Operator, r: Term) -> Option<Bound> {
    let ((Some((ls, li)), lc), (Some((rs, ri)), rc)) = (l, r) else {
        return None;
    };
    // Written as right_col + a OP left_col + b: flip the comparison when
    // the left term is the right side's column.
    let (op, (left, right), (a, b)) = match (ls, rs) {
        (0, 1) => (flip(op)?, (li, ri), (rc, lc)),
        (1, 0) => (op, (ri, li), (lc, rc)),
        _ => return None,
    };
    // right + a OP left + b  ⇔  right - left OP b - a
    let c = b.checked_sub(a)?;
    let (lower_ms, upper_ms) = match op {
        Operator::Lt | Operator::LtEq => (None, Some(c)),
        Operator::Gt | Operator::GtEq => (Some(c), None),
        Operator::Eq => (Some(c), Some(c)),
        _ => return None,
    };
    Some(Bound {
        left,
        right,
        lower_ms,
        upper_ms,
    })
}

/// The comparison with its two sides swapped.
fn flip(op: Operator) -> Option<Operator> {
    Some(match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        Operator::Eq => Operator::Eq,
        _ => return None,
    })
}

/// The conjuncts of `e`.
fn conjuncts(e: &Arc<dyn PhysicalExpr>) -> Vec<&Arc<dyn PhysicalExpr>> {
    match BinaryExpr::downcast(e) {
        Some(b) if *b.op() == Operator::And => {
            let mut out = conjuncts(b.left());
            out.extend(conjuncts(b.right()));
            out
        }
        _ => vec![e],
    }
}

/// `e` as a column of a side (its side and index) plus a constant number
/// of milliseconds: `col`, `CAST(col)`, `col ± INTERVAL`.
fn term(
    e: &Arc<dyn PhysicalExpr>,
    columns: &[datafusion::physical_plan::joins::utils::ColumnIndex],
) -> Option<Term> {
    if let Some(c) = e.downcast_ref::<Column>() {
        let at = columns.get(c.index())?;
        return Some((Some((side_index(at.side)?, at.index)), 0));
    }
    if let Some(c) = e.downcast_ref::<CastExpr>() {
        return term(c.expr(), columns);
    }
    if let Some(l) = e.downcast_ref::<Literal>() {
        return Some((None, interval_ms(l.value())?));
    }
    let b = BinaryExpr::downcast(e)?;
    let (left, right) = (term(b.left(), columns)?, term(b.right(), columns)?);
    match (*b.op(), left, right) {
        (Operator::Plus, (col, a), (None, b)) | (Operator::Plus, (None, b), (col, a)) => {
            Some((col, a.checked_add(b)?))
        }
        (Operator::Minus, (col, a), (None, b)) => Some((col, a.checked_sub(b)?)),
        _ => None,
    }
}

/// An interval literal of a fixed length, in milliseconds.
pub(crate) fn interval_ms(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i64::from(i.days) * 86_400_000 + i.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            Some(i64::from(i.days) * 86_400_000 + i64::from(i.milliseconds))
        }
        ScalarValue::DurationMillisecond(Some(ms)) => Some(*ms),
        ScalarValue::DurationSecond(Some(s)) => s.checked_mul(1000),
        _ => None,
    }
}

/// `BinaryExpr` downcasts, in one place.
trait Downcast {
    fn downcast(e: &Arc<dyn PhysicalExpr>) -> Option<&Self>;
}

impl Downcast for BinaryExpr {
    fn downcast(e: &Arc<dyn PhysicalExpr>) -> Option<&Self> {
        e.downcast_ref::<BinaryExpr>()
    }
}

/// Which input of the join a filter column is from: 0 left, 1 right.
fn side_index(side: datafusion::common::JoinSide) -> Option<usize> {
    match side {
        datafusion::common::JoinSide::Left => Some(0),
        datafusion::common::JoinSide::Right => Some(1),
        datafusion::common::JoinSide::None => None,
    }
}
