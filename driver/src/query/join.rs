//! What a query with a join of two streams must give at submit, as in
//! Spark: an outer join emits a row's NULL-padded form once no row of the
//! other side can match it any more, which needs a watermark on both
//! streams and an event-time bound in the condition; without them it
//! would never emit, and is refused naming what is missing. An inner join
//! runs without them (its state then grows; `max_state_bytes` bounds it).
//! A join emits each row once: append mode.

use sluice_common::spec::{OutputMode, QuerySpec};
use sluice_sql::JoinInfo;

use crate::error::DriverError;

/// Refuses a join of two streams that cannot run as specified; `last`
/// when its output is the query's (the output mode is its own).
pub fn check(spec: &QuerySpec, join: &JoinInfo, last: bool) -> Result<(), DriverError> {
    if last && matches!(spec.output_mode, Some(m) if m != OutputMode::Append) {
        return Err(DriverError::Invalid(
            "output_mode: a join of two streams emits each joined row once, in append mode".into(),
        ));
    }
    let kind = match join.outer {
        [false, false] => return Ok(()),
        [true, false] => "left outer",
        [false, true] => "right outer",
        [true, true] => "full outer",
    };
    let [a, b] = &join.streams;
    let missing = missing(spec, join);
    if missing.is_empty() {
        return Ok(());
    }
    Err(DriverError::Invalid(format!(
        "sql: the {kind} join of the streams `{a}` and `{b}` emits a row without a match once \
         the watermark passes its bound, so it needs {}",
        missing.join("; and ")
    )))
}

/// What an outer join lacks: each stream's watermark on the bound's time
/// column, and a bound closed at both ends.
fn missing(spec: &QuerySpec, join: &JoinInfo) -> Vec<String> {
    let mut out = Vec::new();
    let Some((bound, columns)) = &join.bound else {
        out.push(format!(
            "an event-time bound in its condition, as `{b}.ts BETWEEN {a}.ts AND {a}.ts + INTERVAL '1 hour'`",
            a = join.streams[0],
            b = join.streams[1]
        ));
        return out;
    };
    if bound.lower_ms.is_none() || bound.upper_ms.is_none() {
        let open = if bound.lower_ms.is_none() {
            "below"
        } else {
            "above"
        };
        out.push(format!(
            "a bound closed at both ends (`{}.{}` is unbounded {open} `{}.{}`)",
            join.streams[1], columns[1], join.streams[0], columns[0]
        ));
    }
    for (side, (stream, column)) in join.streams.iter().zip(columns).enumerate() {
        if join.window_end[side] {
            continue;
        }
        match spec.input(stream).and_then(|i| i.watermark) {
            None => out.push(format!(
                "a watermark on `{stream}` (watermarks: {{{stream}: {{column: {column}, delay_ms: ...}}}})"
            )),
            Some(w) if w.column != *column => out.push(format!(
                "the watermark of `{stream}` on the bound's column `{column}`, not `{}`",
                w.column
            )),
            Some(_) => {}
        }
    }
    out
}
