//! The fast `to_char` against DataFusion's own, value for value.

use std::sync::Arc;

use arrow_array::types::{
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, Date32Array, PrimitiveArray, StringArray};
use arrow_schema::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::common::config::ConfigOptions;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF};

use super::*;

/// Values spread over years 0..=9999 (or, `beyond`, also 50 years either
/// side of them), with nulls, the epoch and the days around it (a small
/// LCG: no new dependency, the same values every run).
fn values(per_second: i64, beyond: bool) -> Vec<Option<i64>> {
    let margin = if beyond { 50 * 31_556_952i64 } else { 0 };
    // 0000-01-01 .. 10000-01-01, in seconds.
    let span = 253_402_300_800i64 + 2 * margin;
    let first = -62_167_219_200i64 - margin;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out: Vec<Option<i64>> = (0..4000)
        .map(|i| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let s = first + ((x >> 11) as i64).rem_euclid(span);
            (i % 97 != 0).then(|| s.saturating_mul(per_second) + (x % 7) as i64)
        })
        .collect();
    for s in [
        0,
        -1,
        1,
        86_399,
        86_400,
        -86_400,
        951_782_400,
        1_709_164_800,
    ] {
        out.push(Some(s * per_second));
    }
    out
}

/// The fast `to_char` and DataFusion's over `values`; and whether the fast
/// path wrote the output.
fn both(values: ArrayRef, format: &str) -> (ArrayRef, ArrayRef, bool) {
    let inner = datafusion::functions::datetime::to_char();
    let ours = Wrapped::udf(inner.as_ref().clone(), FastPath);
    let call = |udf: &ScalarUDF| {
        let args = ScalarFunctionArgs {
            number_rows: values.len(),
            arg_fields: vec![
                Arc::new(Field::new("t", values.data_type().clone(), true)),
                Arc::new(Field::new("f", DataType::Utf8, false)),
            ],
            args: vec![
                ColumnarValue::Array(values.clone()),
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(format.into()))),
            ],
            return_field: Arc::new(Field::new("to_char", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        match udf.invoke_with_args(args).expect("to_char") {
            ColumnarValue::Array(a) => a,
            ColumnarValue::Scalar(s) => s.to_array().expect("an array"),
        }
    };
    let format = ColumnarValue::Scalar(ScalarValue::Utf8(Some(format.into())));
    let took = fast(&[ColumnarValue::Array(values.clone()), format]).is_some();
    (call(&ours), call(&inner), took)
}

/// Whether the fast path writes `format`, of a type it writes.
fn writes(format: &str, ty: &DataType) -> bool {
    let timed = ["%H", "%M", "%S"].iter().any(|p| format.contains(p));
    pieces(format).is_some() && !(timed && ty == &DataType::Date32)
}

/// Each format over `a`: the same output as DataFusion's, and from the
/// fast path exactly when it writes the format and every year is 0..=9999.
fn check(a: ArrayRef, in_range: bool) {
    for f in FORMATS {
        let (ours, theirs, took) = both(a.clone(), f);
        assert_eq!(ours.as_ref(), theirs.as_ref(), "{} {f:?}", a.data_type());
        assert_eq!(
            took,
            in_range && writes(f, a.data_type()),
            "{} {f:?}",
            a.data_type()
        );
    }
}

const FORMATS: [&str; 7] = [
    "%Y-%m-%d",
    "%H:%M",
    "%Y%m%d %H:%M:%S",
    "day %d, 100%% of %m/%Y",
    "",
    "%b %e, %Y", // not the fast path's: DataFusion's
    "%Y-%m-%dT%H:%M:%S%.3f",
];

#[test]
fn timestamps_of_every_unit_format_as_datafusion_formats_them() {
    for beyond in [false, true] {
        let v = |per_second| values(per_second, beyond);
        // Nanoseconds reach only years 1677..2262: these stay in range.
        let nanos = values(1, false)
            .into_iter()
            .map(|v| v.map(|s| s.clamp(-9_000_000_000, 9_000_000_000) * 1_000_000_000));
        let arrays: Vec<(ArrayRef, bool)> = vec![
            (
                Arc::new(PrimitiveArray::<TimestampSecondType>::from(v(1))),
                !beyond,
            ),
            (
                Arc::new(PrimitiveArray::<TimestampMillisecondType>::from(v(1_000))),
                !beyond,
            ),
            (
                Arc::new(PrimitiveArray::<TimestampMicrosecondType>::from(v(
                    1_000_000,
                ))),
                !beyond,
            ),
            (
                Arc::new(PrimitiveArray::<TimestampNanosecondType>::from(
                    nanos.collect::<Vec<_>>(),
                )),
                true,
            ),
        ];
        // A stream's times, in order: many rows a second, across days.
        let run = (0..40_000i64).map(|i| (i % 101 != 0).then_some(1_709_164_000_000 + i * 4_321));
        let mut arrays = arrays;
        arrays.push((
            Arc::new(PrimitiveArray::<TimestampMillisecondType>::from(
                run.collect::<Vec<_>>(),
            )),
            true,
        ));
        for (a, in_range) in arrays {
            check(a, in_range);
        }
    }
}

#[test]
fn dates_format_as_datafusion_formats_them() {
    for beyond in [false, true] {
        let days: Vec<Option<i32>> = values(1, beyond)
            .into_iter()
            .map(|v| v.map(|s| s.div_euclid(86_400) as i32))
            .collect();
        check(Arc::new(Date32Array::from(days)), !beyond);
    }
}

#[test]
fn the_fast_path_writes_the_calendar_and_leaves_the_rest() {
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(-1), (1969, 12, 31));
    assert_eq!(civil(11_016), (2000, 2, 29));
    let out = fast(&[
        ColumnarValue::Array(Arc::new(PrimitiveArray::<TimestampMillisecondType>::from(
            vec![Some(1_709_164_799_999), None],
        ))),
        ColumnarValue::Scalar(ScalarValue::Utf8(Some("%Y-%m-%d %H:%M:%S".into()))),
    ])
    .expect("the fast path's");
    let out = out.as_any().downcast_ref::<StringArray>().expect("strings");
    assert_eq!(out.value(0), "2024-02-28 23:59:59");
    assert!(out.is_null(1));
    assert_eq!(pieces("%e"), None);
    assert_eq!(pieces("%"), None);
}
