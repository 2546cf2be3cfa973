//! The rate source: rows `{value: Int64, timestamp_ms: Timestamp(ms)}`, as
//! Spark's rate source (`value` is a `bigint`).
//! `timestamp_ms` is the row's event time; the jsonl sink writes it as
//! milliseconds since the epoch.
//!
//! Partition `p` of `P` holds the values `v` with `v % P == p`, in order, and
//! `timestamp_ms = start_ms + v * 1000 / rows_per_second`. A row is available
//! once its timestamp has passed. Everything here is a pure function of the
//! plan, so a replayed task produces the same rows.

use std::sync::{Arc, LazyLock};

use arrow_array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};

/// Rows per generated `RecordBatch`.
pub const CHUNK_ROWS: u64 = 64 * 1024;

static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::Int64, false),
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
    let rps = rows_per_second.max(1);
    // In u64 while it fits (every value below 1.8e16): no 128-bit division
    // per generated row.
    let offset = match v.checked_mul(1000) {
        Some(ms) => u128::from(ms / rps),
        None => (u128::from(v) * 1000) / u128::from(rps),
    };
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

/// How many of the values `[start, end)` partitions `parts` (a run of
/// the `of` partitions) hold: a task's planned rows.
pub fn rows_of(parts: std::ops::Range<u32>, of: u32, start: u64, end: u64) -> u64 {
    parts.map(|p| partition_range(p, of, start, end).1).sum()
}

/// A task of a batch reads at least this many rows, when the batch has
/// them: small partitions are packed into one task, as Spark packs small
/// files into one partition, so that a task's fixed cost (planning, a
/// durable part file) is not paid per partition.
pub const MIN_TASK_ROWS: u64 = 64 * 1024;

/// The tasks of batch `[start, end)` over `parts` partitions, as
/// (first partition, partition count): runs of consecutive partitions, in
/// order, enough of them that each holds about [`MIN_TASK_ROWS`] rows (at
/// most one per partition), and never more than `max_task_rows` (the
/// driver's cap, recorded in the plan) unless one partition alone holds
/// more. Runs without rows are left out. A pure function of the plan, so a
/// replay makes the same tasks.
pub fn task_groups(
    parts: u32,
    start: u64,
    end: u64,
    max_task_rows: Option<u64>,
) -> Vec<(u32, u32)> {
    let parts = parts.max(1);
    let rows = end.saturating_sub(start);
    let wanted = u32::try_from(rows.div_ceil(MIN_TASK_ROWS))
        .unwrap_or(u32::MAX)
        .clamp(1, parts);
    let mut size = parts.div_ceil(wanted);
    if let Some(cap) = max_task_rows {
        // No partition holds more than ⌈rows / parts⌉ rows.
        let largest = rows.div_ceil(u64::from(parts)).max(1);
        size = size.min(u32::try_from((cap / largest).max(1)).unwrap_or(u32::MAX));
    }
    (0..parts)
        .step_by(size as usize)
        .map(|first| (first, size.min(parts - first)))
        .filter(|&(first, count)| {
            (first..first + count).any(|p| partition_range(p, parts, start, end).1 > 0)
        })
        .collect()
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
        let last = base + (n - 1) * step;
        if i64::try_from(last).is_err() {
            return Err(Error::Encoding(format!(
                "rate source value {last} is past the largest bigint"
            )));
        }
        let values = Int64Array::from_iter_values((0..n).map(|i| (base + i * step) as i64));
        let stamps = TimestampMillisecondArray::from_iter_values(
            values
                .values()
                .iter()
                .map(|&v| timestamp_ms(start_ms, v as u64, rows_per_second)),
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
    fn small_partitions_are_packed_into_tasks_that_cover_each_once() {
        // 1024 partitions of 10 rows: one task.
        assert_eq!(task_groups(1024, 0, 10_240, None), vec![(0, 1024)]);
        // Large partitions: one task each.
        assert_eq!(task_groups(8, 0, 4_000_000, None).len(), 8);
        // 3 tasks' worth over 8 partitions: 3 + 3 + 2.
        assert_eq!(
            task_groups(8, 0, 3 * MIN_TASK_ROWS, None),
            vec![(0, 3), (3, 3), (6, 2)]
        );
        // Fewer rows than partitions: groups without rows are left out.
        assert_eq!(task_groups(4, 6, 7, None), vec![(0, 4)]);
        assert!(task_groups(4, 7, 7, None).is_empty());
        // The driver's cap on a task's rows holds for packed tasks.
        let capped = task_groups(1024, 0, 10_240, Some(100));
        assert_eq!(capped.len(), 103);
        for &(first, count) in &capped {
            let rows: u64 = (first..first + count)
                .map(|p| partition_range(p, 1024, 0, 10_240).1)
                .sum();
            assert!(rows <= 100, "{first}+{count}: {rows} rows");
        }
        // A cap below one partition's rows: one partition per task.
        assert_eq!(task_groups(4, 0, 400, Some(10)).len(), 4);
        for (parts, s, e) in [(7u32, 3u64, 500_000u64), (100, 0, 1_000_000), (3, 5, 9)] {
            let mut covered = Vec::new();
            for (first, count) in task_groups(parts, s, e, Some(30_000)) {
                covered.extend(first..first + count);
            }
            let with_rows: Vec<u32> = (0..parts)
                .filter(|&p| partition_range(p, parts, s, e).1 > 0)
                .collect();
            assert!(with_rows.iter().all(|p| covered.contains(p)));
            let mut sorted = covered.clone();
            sorted.dedup();
            assert_eq!(sorted, covered, "each partition in one task");
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
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(v.value(0), 1);
        assert_eq!(v.value(1), 5);
    }
}
