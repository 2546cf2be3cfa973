//! What a window's length may be: a constant interval of a fixed length,
//! a positive number of milliseconds (the resolution of event time):
//! `'10 seconds'`, `INTERVAL '1' MINUTE`. Months and years vary in length
//! and are refused, and so is a length below a millisecond. The window
//! functions read their lengths through [`millis`] at run time;
//! [`crate::window_check`] checks them, in the same words, at submit.

use datafusion::common::ScalarValue;

/// A fixed-length example for messages.
pub(crate) const EXAMPLE: &str = "such as '10 seconds'";

/// The length of an interval value in milliseconds, and whether it is a
/// whole number of them; or why it is no window length. The milliseconds
/// are the days' and the nanoseconds' (truncated to whole milliseconds).
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
pub(crate) fn shown(v: &ScalarValue) -> String {
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
