//! Window lengths: what a length may be, and each bad one refused before
//! the query runs, naming the call and the argument.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::ScalarValue;

use super::*;
use crate::guard::DEFAULT_BUDGET;
use crate::window_length::length;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("gap", DataType::Utf8, true),
    ]))
}

/// The refusal of `sql` at submit, as the driver checks it.
async fn refusal(sql: &str) -> String {
    let streams = [("input".to_string(), schema())];
    match crate::check(sql, &streams, &[], DEFAULT_BUDGET).await {
        Ok(_) => panic!("{sql}: must be refused"),
        Err(e) => {
            assert!(matches!(e, SqlError::Invalid(_)), "{sql}: {e:?}");
            e.to_string()
        }
    }
}

async fn accepted(sql: &str) {
    let streams = [("input".to_string(), schema())];
    if let Err(e) = crate::check(sql, &streams, &[], DEFAULT_BUDGET).await {
        panic!("{sql}: {e}");
    }
}

fn text(s: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

#[test]
fn a_length_is_a_positive_fixed_number_of_milliseconds() {
    assert_eq!(length(&text("10 seconds")), Ok((10_000, true)));
    assert_eq!(length(&text("1 day")), Ok((86_400_000, true)));
    assert_eq!(length(&text("1500 microseconds")), Ok((1, false)));
    let why = |s: &str| length(&text(s)).unwrap_err();
    assert_eq!(
        why("1 month"),
        "'1 month' must be a positive fixed length such as '10 seconds'; months and years vary in length"
    );
    assert_eq!(
        why("1 nanosecond"),
        "'1 nanosecond' is below the 1 millisecond resolution of event time"
    );
    assert_eq!(
        why(" "),
        "' ' is empty: give an interval such as '10 seconds'"
    );
    for bad in ["0 seconds", "-5 seconds"] {
        assert_eq!(
            why(bad),
            format!("'{bad}' must be a positive fixed length such as '10 seconds'"),
            "{bad:?}"
        );
    }
    assert!(
        why("abc").starts_with("'abc' is not an interval such as '10 seconds': "),
        "{}",
        why("abc")
    );
    assert_eq!(
        length(&ScalarValue::Int64(Some(5))).unwrap_err(),
        "5 is not an interval such as '10 seconds'"
    );
}

#[tokio::test]
async fn bad_window_lengths_are_refused_naming_the_call_and_the_argument() {
    let group =
        |call: &str| format!("SELECT {call} AS w, count(*) AS n FROM input GROUP BY {call}");
    let cases = [
        (
            "window(ts, '0 seconds')",
            "window(ts, '0 seconds'): the size '0 seconds' must be a positive fixed length such as '10 seconds'",
        ),
        (
            "window(ts, '-10 seconds')",
            "window(ts, '-10 seconds'): the size '-10 seconds' must be a positive fixed length",
        ),
        (
            "window(ts, 'abc')",
            "window(ts, 'abc'): the size 'abc' is not an interval such as '10 seconds'",
        ),
        (
            "window(ts, '')",
            "window(ts, ''): the size '' is empty: give an interval such as '10 seconds'",
        ),
        (
            "window(ts, '1 month')",
            "window(ts, '1 month'): the size '1 month' must be a positive fixed length such as '10 seconds'; months and years vary in length",
        ),
        (
            "window(ts, '1 nanosecond')",
            "window(ts, '1 nanosecond'): the size '1 nanosecond' is below the 1 millisecond resolution",
        ),
        (
            "window(ts, '1500 microseconds')",
            "the size '1500 microseconds' is not a whole number of milliseconds",
        ),
        (
            "hop(ts, '10 seconds', '1 year')",
            "hop(ts, '10 seconds', '1 year'): the slide '1 year' must be a positive fixed length",
        ),
        (
            "window(ts, '5 seconds', '10 seconds')",
            "the slide (10000 ms) is longer than the size (5000 ms)",
        ),
        (
            "window(ts, '1 day', '1 milliseconds')",
            "window(ts, '1 day', '1 milliseconds'): size / slide = 86,400,000 windows per row, above the cap of 10,000",
        ),
        (
            "session_window(ts, '0 seconds')",
            "session_window(ts, '0 seconds'): the gap '0 seconds' must be a positive fixed length",
        ),
        (
            "session_window(ts, '1 month')",
            "the gap '1 month' must be a positive fixed length such as '10 seconds'; months and years vary",
        ),
        (
            "session_window(ts, gap)",
            "session_window(ts, gap): the gap gap must be a constant interval such as '10 seconds'",
        ),
    ];
    for (call, wanted) in cases {
        let e = refusal(&group(call)).await;
        assert!(e.contains(wanted), "{call}: {e}");
    }
    // Outside a GROUP BY, and in a subquery, alike.
    let e = refusal("SELECT window(ts, '1 month')['start'] AS s FROM input").await;
    assert!(e.contains("months and years vary in length"), "{e}");
    let e = refusal(
        "SELECT n FROM (SELECT window(ts, 'abc') AS w, count(*) AS n FROM input GROUP BY window(ts, 'abc'))",
    )
    .await;
    assert!(e.contains("the size 'abc' is not an interval"), "{e}");
}

#[tokio::test]
async fn good_window_lengths_are_accepted_up_to_the_cap() {
    for call in [
        "window(ts, '10 seconds')",
        "window(ts, INTERVAL '1' MINUTE)",
        "window(ts, CAST('10 seconds' AS INTERVAL))",
        "hop(ts, '10 seconds', '1 millisecond')",
        "window(ts, '1 day', '1 day')",
        "session_window(ts, '30 seconds')",
    ] {
        accepted(&format!(
            "SELECT {call} AS w, count(*) AS n FROM input GROUP BY {call}"
        ))
        .await;
    }
    // 10 seconds / 1 ms is the cap itself; one window more is refused.
    let e = refusal(
        "SELECT window(ts, '10001 milliseconds', '1 millisecond') AS w, count(*) AS n FROM input \
         GROUP BY window(ts, '10001 milliseconds', '1 millisecond')",
    )
    .await;
    assert!(e.contains("size / slide = 10,001 windows per row"), "{e}");
}

#[test]
fn the_cap_reads_with_separators() {
    assert_eq!(thousands(MAX_WINDOWS_PER_ROW), "10,000");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(86_400_000), "86,400,000");
}
