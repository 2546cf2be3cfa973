//! The Nexmark source's reader: generates a task's rows of its table (see
//! `sluice_common::nexmark`), partition by partition, a chunk at a time.

use arrow_schema::SchemaRef;
use futures::StreamExt;
use sluice_common::nexmark;
use sluice_common::spec::NexmarkSpec;
use sluice_proto::NexmarkTask;

use super::{Batches, Columns, ReadCounters, SourceReader};
use crate::error::ExecutorError;

/// Reads the rows `[start, end)` of partitions `[first, first + count)`.
pub struct NexmarkReader {
    spec: NexmarkSpec,
    start: u64,
    end: u64,
    partitions: std::ops::Range<u32>,
}

impl NexmarkReader {
    pub fn new(task: &NexmarkTask) -> Result<Self, ExecutorError> {
        let bad = |m: String| ExecutorError::MalformedTask(format!("nexmark source: {m}"));
        let source = task
            .source
            .as_ref()
            .ok_or_else(|| bad("no settings".into()))?;
        let spec = NexmarkSpec::try_from(source).map_err(|e| bad(e.to_string()))?;
        let (first, count) = (task.first_partition, task.partition_count.max(1));
        if u64::from(first) + u64::from(count) > u64::from(spec.partitions) {
            return Err(bad("partition out of range".into()));
        }
        if task.end_row < task.start_row {
            return Err(bad("end_row is below start_row".into()));
        }
        Ok(NexmarkReader {
            spec,
            start: task.start_row,
            end: task.end_row,
            partitions: first..first + count,
        })
    }
}

impl SourceReader for NexmarkReader {
    fn schema(&self) -> SchemaRef {
        nexmark::schema(self.spec.table)
    }

    fn planned_rows(&self) -> Option<u64> {
        Some(sluice_common::rate::rows_of(
            self.partitions.clone(),
            self.spec.partitions,
            self.start,
            self.end,
        ))
    }

    fn read(self: Box<Self>, columns: Columns, _counters: ReadCounters) -> Batches {
        let NexmarkReader {
            spec,
            start,
            end,
            partitions,
        } = *self;
        let chunks = partitions
            .flat_map(move |p| nexmark::chunks(&spec, p, (start, end), columns.indexes()));
        futures::stream::iter(chunks.map(|c| c.map_err(ExecutorError::from))).boxed()
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::RecordBatch;
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    use sluice_common::spec::{MAX_BASE_TIME_MS, NexmarkTable, QuerySpec, SourceSpec};

    use super::*;

    /// The bid table of 2000 events from `base_time_ms`, 100 a second.
    fn bids(base_time_ms: u64) -> NexmarkSpec {
        let spec = QuerySpec::parse(&format!(
            "name: q\nsource: {{nexmark: {{table: bid, events_per_second: 100, \
             total_events: 2000, partitions: 1, base_time_ms: {base_time_ms}}}}}\n\
             sink: {{discard: {{}}}}\n"
        ))
        .expect("a valid spec");
        match spec.source {
            Some(SourceSpec::Nexmark(n)) => n,
            other => panic!("not nexmark: {other:?}"),
        }
    }

    /// The values of column `column` of `sql` over the rows of `spec`
    /// (unvalidated: a base past the cap is run too), as text.
    async fn run(spec: &NexmarkSpec, sql: &str, column: &str) -> Result<Vec<String>, String> {
        let rows = nexmark::generate(spec, 0, nexmark::total_rows(spec).unwrap()).unwrap();
        let input = futures::stream::iter(rows.into_iter().map(Ok)).boxed();
        let streams = sluice_sql::Streams {
            tables: vec![("bid".to_string(), nexmark::schema(NexmarkTable::Bid))],
            reading: "bid".to_string(),
        };
        let budget = sluice_sql::guard::DEFAULT_BUDGET;
        let mut out = sluice_sql::run(sql, streams, input, &[], budget)
            .await
            .map_err(|e| e.to_string())?;
        let mut values = Vec::new();
        while let Some(b) = out.next().await {
            let b: RecordBatch = b.map_err(|e| e.to_string())?;
            let array = b.column_by_name(column).expect("the column");
            let f = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default()).unwrap();
            values.extend((0..b.num_rows()).map(|r| f.value(r).to_string()));
        }
        Ok(values)
    }

    #[tokio::test]
    async fn time_functions_work_over_events_from_the_latest_base_time() {
        // Nexmark's q10 as Sluice runs it: the bid's day and hour:minute.
        let q10 = "SELECT auction, bidder, price, date_time, extra, \
                   to_char(date_time, '%Y-%m-%d') AS dt, to_char(date_time, '%H:%M') AS hm FROM bid";
        let date_bin = "SELECT date_bin(INTERVAL '10 seconds', date_time) AS w, \
                        window(date_time, '10 seconds')['end'] AS e FROM bid";
        let at_cap = bids(MAX_BASE_TIME_MS);
        let days = run(&at_cap, q10, "dt").await.unwrap();
        assert_eq!(days.len(), 1840, "the bids of 2000 events");
        assert!(days.iter().all(|d| d == "2200-01-01"), "{days:?}");
        let hours = run(&at_cap, q10, "hm").await.unwrap();
        assert_eq!(hours.last().map(String::as_str), Some("00:00"));
        let starts = run(&at_cap, date_bin, "w").await.unwrap();
        assert_eq!(
            starts.first().map(String::as_str),
            Some("2200-01-01T00:00:00")
        );
        assert_eq!(
            starts.last().map(String::as_str),
            Some("2200-01-01T00:00:10")
        );
        let ends = run(&at_cap, date_bin, "e").await.unwrap();
        assert_eq!(ends.last().map(String::as_str), Some("2200-01-01T00:00:20"));

        // Past 2262, which a spec cannot set, date_bin gives no window
        // (null); at the largest base a spec could set before (i64::MAX / 2
        // ms), to_char fails the batch.
        let mut past = at_cap.clone();
        past.base_time_ms = Some(9_300_000_000_000);
        let starts = run(&past, date_bin, "w").await.unwrap();
        assert!(starts.iter().all(String::is_empty), "{:?}", starts.first());
        past.base_time_ms = Some(i64::MAX as u64 / 2);
        let e = run(&past, q10, "dt")
            .await
            .expect_err("to_char in year 146 million");
        assert!(e.contains("to datetime"), "{e}");
    }
}
