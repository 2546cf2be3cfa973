//! `to_char` (and its alias `date_format`) with a fast path for the
//! formats streams group by: a constant format of `%Y`, `%m`, `%d`, `%H`,
//! `%M`, `%S`, `%%` and literal text, over timestamps without a time zone
//! or dates. DataFusion's `to_char` formats each value through chrono,
//! which parses the format string again for every row (Nexmark q17 spent
//! a third of its CPU there). The fast path writes the digits from the
//! calendar date it computes, once per second (or day) of the input that
//! differs from the row before; any other call, and any call
//! with a year outside 0..=9999, is DataFusion's own function, so the
//! output is the same (the tests compare the two).

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF};
use datafusion::prelude::SessionContext;

use crate::wrapped::{Call, Wrapped};

/// Replaces `ctx`'s `to_char` by the one with the fast path.
pub fn register(ctx: &SessionContext) {
    if let Some(inner) = ctx.udf("to_char").ok().map(|u| u.as_ref().clone()) {
        ctx.register_udf(Wrapped::udf(inner, FastPath));
    }
}

/// The fast path, in front of DataFusion's function.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FastPath;

/// One piece of a format the fast path writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece<'f> {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Text(&'f str),
}

/// The pieces of `format`, if it has only what the fast path writes.
fn pieces(format: &str) -> Option<Vec<Piece<'_>>> {
    let mut out = Vec::new();
    let mut rest = format;
    while !rest.is_empty() {
        let Some(at) = rest.find('%') else {
            out.push(Piece::Text(rest));
            break;
        };
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        let piece = match rest.as_bytes().get(at + 1)? {
            b'Y' => Piece::Year,
            b'm' => Piece::Month,
            b'd' => Piece::Day,
            b'H' => Piece::Hour,
            b'M' => Piece::Minute,
            b'S' => Piece::Second,
            b'%' => Piece::Text("%"),
            _ => return None,
        };
        out.push(piece);
        rest = &rest[at + 2..];
    }
    Some(out)
}

/// The proleptic Gregorian (year, month, day) of a day counted from
/// 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Writes `seconds` since the epoch in `pieces` into `out`; `false` for a
/// year the fast path does not write (chrono signs and widens it).
fn write(seconds: i64, pieces: &[Piece], out: &mut String) -> bool {
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil(days);
    if !(0..=9999).contains(&year) {
        return false;
    }
    let two = |out: &mut String, v: u32| {
        out.push(char::from(b'0' + (v / 10) as u8));
        out.push(char::from(b'0' + (v % 10) as u8));
    };
    for p in pieces {
        match *p {
            Piece::Year => {
                let y = year as u32;
                two(out, y / 100);
                two(out, y % 100);
            }
            Piece::Month => two(out, month),
            Piece::Day => two(out, day),
            Piece::Hour => two(out, (secs / 3600) as u32),
            Piece::Minute => two(out, (secs / 60 % 60) as u32),
            Piece::Second => two(out, (secs % 60) as u32),
            Piece::Text(t) => out.push_str(t),
        }
    }
    true
}

/// Whole seconds since the epoch of each value of a timestamp without a
/// time zone or a date (of a null, any number); `None` for any other type.
fn seconds_of(array: &dyn Array) -> Option<Vec<i64>> {
    fn each<T: ArrowPrimitiveType>(array: &dyn Array, f: impl Fn(T::Native) -> i64) -> Vec<i64> {
        array
            .as_primitive::<T>()
            .values()
            .iter()
            .map(|&v| f(v))
            .collect()
    }
    Some(match array.data_type() {
        DataType::Timestamp(unit, None) => match unit {
            TimeUnit::Second => each::<TimestampSecondType>(array, |v| v),
            TimeUnit::Millisecond => {
                each::<TimestampMillisecondType>(array, |v| v.div_euclid(1_000))
            }
            TimeUnit::Microsecond => {
                each::<TimestampMicrosecondType>(array, |v| v.div_euclid(1_000_000))
            }
            TimeUnit::Nanosecond => {
                each::<TimestampNanosecondType>(array, |v| v.div_euclid(1_000_000_000))
            }
        },
        DataType::Date32 => each::<Date32Type>(array, |d| i64::from(d) * 86_400),
        _ => return None,
    })
}

/// The fast path's output for `args`, or `None` when the call is not one
/// it writes.
fn fast(args: &[ColumnarValue]) -> Option<ArrayRef> {
    let [
        ColumnarValue::Array(values),
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(format))),
    ] = args
    else {
        return None;
    };
    let pieces = pieces(format)?;
    // Date32 with a time of day is DataFusion's retry through Date64.
    let timed = pieces
        .iter()
        .any(|p| matches!(p, Piece::Hour | Piece::Minute | Piece::Second));
    if timed && values.data_type() == &DataType::Date32 {
        return None;
    }
    let seconds = seconds_of(values.as_ref())?;
    let mut builder = StringBuilder::with_capacity(values.len(), values.len() * format.len());
    // Rows of a stream come in time order, so the text of a row is most
    // often the last row's: it is written again only when the second (or,
    // for a format of the date alone, the day) changes.
    let per = if timed { 1 } else { 86_400 };
    let mut text = String::with_capacity(format.len() + 8);
    let mut last = None;
    let nulls = values.nulls();
    for (i, &s) in seconds.iter().enumerate() {
        if nulls.is_some_and(|n| n.is_null(i)) {
            builder.append_null();
            continue;
        }
        if last != Some(s.div_euclid(per)) {
            text.clear();
            if !write(s, &pieces, &mut text) {
                return None;
            }
            last = Some(s.div_euclid(per));
        }
        builder.append_value(&text);
    }
    Some(Arc::new(builder.finish()))
}

impl Call for FastPath {
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match fast(&args.args) {
            Some(out) => Ok(ColumnarValue::Array(out)),
            None => inner.invoke_with_args(args),
        }
    }
}

#[cfg(test)]
#[path = "to_char_tests.rs"]
mod tests;
