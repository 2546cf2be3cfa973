//! The rate source: rows `{value: UInt64, timestamp_ms: Timestamp(ms)}`.
//! `timestamp_ms` is the row's event time; the jsonl sink writes it as
//! milliseconds since the epoch.
//!
//! Partition `p` of `P` holds the values `v` with `v % P == p`, in order, and
//! `timestamp_ms = start_ms + v * 1000 / rows_per_second`. A row is available
//! once its timestamp has passed. Everything here is a pure function of the
//! plan, so a replayed task produces the same rows.

use std::sync::{Arc, LazyLock};

use arrow_array::{RecordBatch, TimestampMillisecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};

/// Rows per generated `RecordBatch`.
pub const CHUNK_ROWS: u64 = 64 * 1024;

static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::UInt64, false),
        Field::new(
            "timestamp_ms",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
});

/// The schema of the rate source's rows.
pub fn schema() -> SchemaRef {
    SCHEMA.clone()
}

/// The timestamp of value `v`.
pub fn timestamp_ms(start_ms: i64, v: u64, rows_per_second: u64) -> i64 {
    let offset = (u128::from(v) * 1000) / u128::from(rows_per_second.max(1));
    start_ms.saturating_add(i64::try_from(offset).unwrap_or(i64::MAX))
}

/// How many rows (values `0..n`) are available at `now_ms`: those whose
/// timestamp is at most `now_ms`, capped at `total_rows`.
pub fn available_rows(start_ms: i64, now_ms: i64, rows_per_second: u64, total: Option<u64>) -> u64 {
    let n = if now_ms < start_ms {
        0
    } else {
        // v is available iff floor(v * 1000 / rps) <= now - start,
        // i.e. v < (now - start + 1) * rps / 1000, rounded up.
        let elapsed = u128::from((now_ms - start_ms) as u64) + 1;
        let n = (elapsed * u128::from(rows_per_second)).div_ceil(1000);
        u64::try_from(n).unwrap_or(u64::MAX)
    };
    total.map_or(n, |t| n.min(t))
}

/// The first value and the number of values of partition `p` (of `parts`)
/// within `[start, end)`.
pub fn partition_range(p: u32, parts: u32, start: u64, end: u64) -> (u64, u64) {
    let (p, parts) = (u64::from(p), u64::from(parts.max(1)));
    let first = start + (p + parts - start % parts) % parts;
    if first >= end {
        (first, 0)
    } else {
        (first, (end - 1 - first) / parts + 1)
    }
}

/// The rows of partition `p` for one batch, in chunks of [`CHUNK_ROWS`].
pub fn generate(
    p: u32,
    parts: u32,
    rows_per_second: u64,
    start_ms: i64,
    start: u64,
    end: u64,
) -> Result<Vec<RecordBatch>> {
    chunks(p, parts, rows_per_second, start_ms, start, end).collect()
}

/// Like [`generate`], one chunk at a time: memory holds one chunk, however
/// many rows the task has.
pub fn chunks(
    p: u32,
    parts: u32,
    rows_per_second: u64,
    start_ms: i64,
    start: u64,
    end: u64,
) -> impl Iterator<Item = Result<RecordBatch>> {
    let (first, count) = partition_range(p, parts, start, end);
    let step = u64::from(parts.max(1));
    (0..count.div_ceil(CHUNK_ROWS)).map(move |i| {
        let done = i * CHUNK_ROWS;
        let n = (count - done).min(CHUNK_ROWS);
        let base = first + done * step;
        let values: UInt64Array = (0..n).map(|i| base + i * step).collect();
        let stamps = TimestampMillisecondArray::from_iter_values(
            values
                .values()
                .iter()
                .map(|&v| timestamp_ms(start_ms, v, rows_per_second)),
        );
        RecordBatch::try_new(schema(), vec![Arc::new(values), Arc::new(stamps)])
            .map_err(|e| Error::Encoding(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cover_a_range_exactly_once() {
        for parts in [1u32, 3, 4, 7] {
            for (s, e) in [(0u64, 0u64), (0, 1), (5, 23), (10, 11), (3, 100)] {
                let mut seen = Vec::new();
                for p in 0..parts {
                    let (first, n) = partition_range(p, parts, s, e);
                    for i in 0..n {
                        let v = first + i * u64::from(parts);
                        assert_eq!(v % u64::from(parts), u64::from(p));
                        seen.push(v);
                    }
                }
                seen.sort_unstable();
                assert_eq!(
                    seen,
                    (s..e).collect::<Vec<_>>(),
                    "parts={parts} range={s}..{e}"
                );
            }
        }
    }

    #[test]
    fn availability_follows_timestamps() {
        // 10 rows/s: value v has timestamp start + 100 * v.
        assert_eq!(available_rows(1000, 999, 10, None), 0);
        assert_eq!(available_rows(1000, 1000, 10, None), 1);
        assert_eq!(available_rows(1000, 1099, 10, None), 1);
        assert_eq!(available_rows(1000, 1100, 10, None), 2);
        assert_eq!(available_rows(1000, 1_000_000, 10, Some(5)), 5);
        for n in 0..50u64 {
            let now = 1000 + n as i64 * 37;
            let avail = available_rows(1000, now, 10, None);
            assert!(timestamp_ms(1000, avail - 1, 10) <= now);
            assert!(timestamp_ms(1000, avail, 10) > now);
        }
    }

    #[test]
    fn generated_rows_are_deterministic() {
        let a = generate(1, 4, 100, 5000, 0, 200_000).unwrap();
        let b = generate(1, 4, 100, 5000, 0, 200_000).unwrap();
        assert_eq!(a, b);
        let rows: usize = a.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 50_000);
        let v = a[0]
            .column(0)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap();
        assert_eq!(v.value(0), 1);
        assert_eq!(v.value(1), 5);
    }
}
