//! Windows through the planner: tumbling keys, sliding expansion, and the
//! window key an aggregation evicts by.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::guard::DEFAULT_BUDGET as BUDGET;
use crate::{Aggregation, InputBatches, WindowEnd, run};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

/// Rows at 0, 3, 6, ... seconds, keys alternating 0 and 1.
fn input() -> InputBatches {
    let ts: TimestampMillisecondArray = (0..10).map(|i| Some(i * 3000)).collect();
    let k: Int64Array = (0..10).map(|i| i % 2).collect();
    let b = RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(ts)]).unwrap();
    Box::pin(futures::stream::iter(vec![Ok(b)]))
}

async fn rows(sql: &str) -> Vec<String> {
    let mut out = run(sql, schema(), input(), &[], BUDGET).await.unwrap();
    let options = FormatOptions::default();
    let mut lines = Vec::new();
    while let Some(b) = out.next().await {
        let b = b.unwrap();
        let f: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            lines.push(
                f.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    lines.sort();
    lines
}

#[tokio::test]
async fn a_tumbling_window_groups_rows_by_their_window() {
    let got = rows(
        "SELECT window.start AS s, window.end AS e, count(*) AS n FROM (SELECT window(ts, '10 seconds') AS window FROM input) GROUP BY window",
    )
    .await;
    assert_eq!(
        got,
        [
            "1970-01-01T00:00:00 1970-01-01T00:00:10 4",
            "1970-01-01T00:00:10 1970-01-01T00:00:20 3",
            "1970-01-01T00:00:20 1970-01-01T00:00:30 3",
        ]
    );
}

#[tokio::test]
async fn a_sliding_window_puts_a_row_in_each_window_that_holds_it() {
    let got = rows(
        "SELECT window(ts, '10 seconds', '5 seconds')['start'] AS s, count(*) AS n FROM input GROUP BY window(ts, '10 seconds', '5 seconds')",
    )
    .await;
    // Rows at 0,3,...,27 s; windows [-5,5) [0,10) [5,15) ... [25,35).
    assert_eq!(
        got,
        [
            "1969-12-31T23:59:55 2",
            "1970-01-01T00:00:00 4",
            "1970-01-01T00:00:05 3",
            "1970-01-01T00:00:10 3",
            "1970-01-01T00:00:15 4",
            "1970-01-01T00:00:20 3",
            "1970-01-01T00:00:25 1",
        ]
    );
    let refused = run(
        "SELECT window(ts, '10 seconds', '5 seconds') AS w FROM input",
        schema(),
        input(),
        &[],
        BUDGET,
    )
    .await;
    let mut out = refused.unwrap();
    let e = out.next().await.unwrap().unwrap_err().to_string();
    assert!(e.contains("only in GROUP BY"), "{e}");
}

#[tokio::test]
async fn an_aggregation_names_its_window_key() {
    let plan = |sql: &'static str| async move {
        Aggregation::plan(sql, schema(), input(), &[], BUDGET)
            .await
            .unwrap()
            .unwrap()
            .window()
    };
    assert_eq!(
        plan("SELECT k, window(ts, '10 seconds') AS w, count(*) AS n FROM input GROUP BY k, window(ts, '10 seconds')").await,
        Some((1, WindowEnd::Field))
    );
    assert_eq!(
        plan("SELECT hop(ts, '10 seconds', '5 seconds') AS w, count(*) AS n FROM input GROUP BY hop(ts, '10 seconds', '5 seconds')").await,
        Some((0, WindowEnd::Field))
    );
    assert_eq!(
        plan("SELECT date_bin(INTERVAL '1 minute', ts) AS m, count(*) AS n FROM input GROUP BY date_bin(INTERVAL '1 minute', ts)").await,
        Some((0, WindowEnd::Plus(60_000)))
    );
    assert_eq!(
        plan("SELECT k, count(*) AS n FROM input GROUP BY k").await,
        None
    );
}

#[tokio::test]
async fn a_session_window_is_a_group_key_the_aggregation_names() {
    let sql = "SELECT k, count(*) AS n, session_window(ts, '5 seconds')['start'] AS s, \
               session_window(ts, '5 seconds')['end'] AS e \
               FROM input GROUP BY k, session_window(ts, '5 seconds')";
    let agg = Aggregation::plan(sql, schema(), input(), &[], BUDGET)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(agg.session(), Some(1));
    assert_eq!(agg.window(), Some((1, WindowEnd::Field)));
    let checked = crate::check(sql, &[(crate::INPUT.into(), schema())], &[], BUDGET)
        .await
        .unwrap();
    assert_eq!(checked.window.as_deref(), Some("ts"));
    // Each row is its own session until the reduce stage merges them.
    let got = rows("SELECT session_window(ts, '5 seconds')['end'] AS e, count(*) FROM input GROUP BY session_window(ts, '5 seconds')").await;
    assert_eq!(got.len(), 10, "{got:?}");
    for refused in [
        "SELECT session_window(ts, '5 seconds') AS s FROM input",
        "SELECT k FROM input WHERE session_window(ts, '5 seconds')['end'] > ts",
        "SELECT count(*) FROM input GROUP BY session_window(ts, '5 seconds'), window(ts, '10 seconds')",
    ] {
        let e = crate::check(refused, &[(crate::INPUT.into(), schema())], &[], BUDGET)
            .await
            .expect_err(refused)
            .to_string();
        assert!(e.contains("session_window"), "{refused}: {e}");
    }
}

#[test]
fn sliding_windows_past_the_task_pool_fail_naming_them_before_they_are_built() {
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 20));
    let window = super::Window::expanding(pool.clone());
    let ts: TimestampMillisecondArray = (0..10).map(|i| Some(i * 1000)).collect();
    // A minute by the second: 60 windows a row, 9,600 bytes.
    let held = window.reserve(&ts, 60_000, 1000).unwrap().unwrap();
    assert_eq!(held.size(), 600 * 16);
    drop(held);
    // A day by the second: 86,400 windows a row, 13.8 MB past a 1 MiB pool.
    let e = window
        .reserve(&ts, 86_400_000, 1000)
        .unwrap_err()
        .to_string();
    assert!(e.contains("864000 sliding windows of 10 rows"), "{e}");
    assert_eq!(pool.reserved(), 0, "a refused reservation holds nothing");
}
