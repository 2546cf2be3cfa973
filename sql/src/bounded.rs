//! The functions whose output grows from a numeric argument rather than
//! from their input (`repeat(s, n)`, `lpad`/`rpad(s, n)`,
//! `array_repeat(x, n)`, `range`/`generate_series(a, b[, step])`), wrapped
//! so that one call (one batch of rows) builds at most
//! [`MAX_CALL_BYTES`]: `repeat('x', 1000000000)` fails its query, naming
//! the function and the limit, instead of allocating gigabytes and taking
//! the executor (and every other query's tasks) down.
//!
//! The wrapper estimates a call's output from its arguments before it
//! runs, and otherwise is the function itself. The estimate is pure
//! ([`estimate`]). A call refused while DataFusion folds constants is left
//! unfolded, so the refusal comes when the task runs.

#[cfg(test)]
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array};
use arrow_schema::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF};
use datafusion::prelude::SessionContext;

use crate::wrapped::{Call, Wrapped};

/// The most bytes one call of a wrapped function may build.
pub const MAX_CALL_BYTES: u64 = 256 << 20;

/// How a wrapped function's output size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// The first argument's length times the second: `repeat`.
    Repeat,
    /// The second argument, in characters of up to 4 bytes: `lpad`, `rpad`.
    Pad,
    /// The second argument, in elements: `array_repeat`.
    Elements,
    /// The elements of an integer range: `range`, `generate_series`.
    Range,
}

const WRAPPED: [(&str, Growth); 6] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::Elements),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
];

/// Replaces the growing functions of `ctx` by their bounded wrappers.
pub fn register(ctx: &SessionContext) {
    for (name, growth) in WRAPPED {
        if let Some(inner) = ctx.udf(name).ok().map(|u| u.as_ref().clone()) {
            ctx.register_udf(Wrapped::udf(inner, growth));
        }
    }
}

/// One argument's per-row values as integers (a string's length for the
/// first argument of `repeat`): a scalar's one value, or an array's.
enum Values {
    One(Option<i64>),
    Each(Int64Array),
}

impl Values {
    fn get(&self, row: usize) -> Option<i64> {
        match self {
            Values::One(v) => *v,
            Values::Each(a) => (!a.is_null(row)).then(|| a.value(row)),
        }
    }
}

fn integers(arg: &ColumnarValue) -> Option<Values> {
    match arg {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64).ok()? {
            ScalarValue::Int64(v) => Some(Values::One(v)),
            _ => None,
        },
        ColumnarValue::Array(a) => {
            let cast = arrow_cast::cast(a, &DataType::Int64).ok()?;
            Some(Values::Each(
                cast.as_any().downcast_ref::<Int64Array>()?.clone(),
            ))
        }
    }
}

fn lengths(arg: &ColumnarValue) -> Option<Values> {
    match arg {
        ColumnarValue::Scalar(s) => {
            let text = match s {
                ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => v,
                _ => return None,
            };
            Some(Values::One(text.as_ref().map(|t| t.len() as i64)))
        }
        ColumnarValue::Array(a) => {
            let len: ArrayRef = datafusion::arrow::compute::kernels::length::length(a).ok()?;
            integers(&ColumnarValue::Array(len))
        }
    }
}

/// The bytes one call over `rows` rows of `args` would build; `None` when
/// the arguments are not of a shape the estimate knows (the call runs).
fn estimate(growth: Growth, args: &[ColumnarValue], rows: usize) -> Option<u64> {
    let rows = rows.max(1);
    let per_row: Box<dyn Fn(usize) -> u64> = match growth {
        Growth::Repeat => {
            let (s, n) = (lengths(args.first()?)?, integers(args.get(1)?)?);
            Box::new(move |r| product(s.get(r), n.get(r), 1))
        }
        Growth::Pad => {
            let n = integers(args.get(1)?)?;
            Box::new(move |r| product(n.get(r), Some(1), 4))
        }
        Growth::Elements => {
            let n = integers(args.get(1)?)?;
            Box::new(move |r| product(n.get(r), Some(1), 8))
        }
        Growth::Range => {
            let ints: Vec<Values> = args.iter().map(integers).collect::<Option<_>>()?;
            Box::new(move |r| range_len(&ints, r).saturating_mul(8))
        }
    };
    Some((0..rows).fold(0u64, |sum, r| sum.saturating_add(per_row(r))))
}

fn product(a: Option<i64>, b: Option<i64>, unit: u64) -> u64 {
    let (a, b) = (a.unwrap_or(0).max(0) as u64, b.unwrap_or(0).max(0) as u64);
    a.saturating_mul(b).saturating_mul(unit)
}

/// The elements of `range(stop)`, `range(start, stop)` or `range(start,
/// stop, step)` at row `r`.
fn range_len(ints: &[Values], r: usize) -> u64 {
    let at = |i: usize| ints.get(i).and_then(|v| v.get(r));
    let (start, stop, step) = match ints.len() {
        1 => (Some(0), at(0), Some(1)),
        2 => (at(0), at(1), Some(1)),
        _ => (at(0), at(1), at(2)),
    };
    let (Some(start), Some(stop), Some(step)) = (start, stop, step) else {
        return 0;
    };
    if step == 0 {
        return 0;
    }
    let span = (i128::from(stop) - i128::from(start)) / i128::from(step);
    u64::try_from(span.max(0)).unwrap_or(u64::MAX)
}

impl Call for Growth {
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let Some(bytes) = estimate(*self, &args.args, args.number_rows)
            && bytes > MAX_CALL_BYTES
        {
            return Err(DataFusionError::Execution(format!(
                "{}(...) would build {bytes} bytes for one batch, above the limit of \
                 {MAX_CALL_BYTES} bytes per call",
                inner.name()
            )));
        }
        inner.invoke_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(v: ScalarValue) -> ColumnarValue {
        ColumnarValue::Scalar(v)
    }

    #[test]
    fn the_estimate_follows_each_functions_growth() {
        let s = || scalar(ScalarValue::Utf8(Some("ab".into())));
        let n = |v: i64| scalar(ScalarValue::Int64(Some(v)));
        assert_eq!(estimate(Growth::Repeat, &[s(), n(3)], 10), Some(60));
        assert_eq!(estimate(Growth::Repeat, &[s(), n(-3)], 10), Some(0));
        assert_eq!(estimate(Growth::Pad, &[s(), n(5)], 2), Some(40));
        assert_eq!(estimate(Growth::Elements, &[n(1), n(4)], 1), Some(32));
        assert_eq!(estimate(Growth::Range, &[n(10)], 2), Some(160));
        assert_eq!(estimate(Growth::Range, &[n(0), n(10), n(5)], 1), Some(16));
        assert_eq!(estimate(Growth::Range, &[n(0), n(10), n(0)], 1), Some(0));
        let counts: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(1_000)]));
        let each = ColumnarValue::Array(counts);
        assert_eq!(estimate(Growth::Repeat, &[s(), each], 3), Some(2_002));
        let huge = estimate(Growth::Repeat, &[s(), n(1_000_000_000)], 15).unwrap();
        assert!(huge > MAX_CALL_BYTES);
    }
}
