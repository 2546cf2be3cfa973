//! A full outer join of two streams within an event-time bound, with
//! watermarks, over rows some of which have no event time (NULL `ts`):
//! such a row matches nothing (the bound's comparison with it is NULL),
//! so it is emitted in its own batch, padded with NULLs, and never held.
//!
//! The sink equals DataFusion's full join over all the files at once,
//! NULL-time rows included; the batches' progress counts them; and the
//! last batch, after the end of the input, leaves no row in the state.

use sluice_common::checkpoint::Log;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, RecordBatch, TimestampMillisecondArray};
use sluice_tests::inputs::{self, SCHEMA_YAML};
use sluice_tests::oracle::{committed, concat, expected_with};
use sluice_tests::{Cluster, QueryState, log_records};

const ROWS: u64 = 40;
/// Two files of rows, then one far later in event time, then one later
/// still: the batch that reads the last runs with a watermark past every
/// earlier row's bound.
const FILES: u64 = 4;

/// Orders without a payment (id % 4 = 2), payments without an order (id %
/// 4 = 1), and for each stream every 7th row without an event time.
const FULL: &str = "SELECT o.id AS oid, o.city, p.id AS pid, p.score \
     FROM (SELECT id, ts, city FROM o WHERE id % 4 <> 1) o \
     FULL JOIN (SELECT id, ts, score FROM p WHERE id % 4 <> 2) p ON o.id = p.id \
     AND p.ts BETWEEN o.ts - INTERVAL '5 seconds' AND o.ts + INTERVAL '10 seconds'";

/// File `n` of either stream: the same ids and times in both, every row
/// whose id is 3 mod 7 without a time.
fn file(n: u64) -> RecordBatch {
    let rows = match n {
        0..2 => inputs::rows(n, ROWS),
        2 => inputs::rows(20_000, 1),
        _ => inputs::rows(30_000, 1),
    };
    let ids = rows
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .expect("ids");
    let ts = rows
        .column(1)
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .expect("times");
    let untimed: TimestampMillisecondArray = (0..rows.num_rows())
        .map(|i| (ids.value(i) % 7 != 3).then(|| ts.value(i)))
        .collect();
    let mut columns = rows.columns().to_vec();
    columns[1] = Arc::new(untimed);
    RecordBatch::try_new(rows.schema(), columns).expect("rows with NULL times")
}

fn source(dir: &Path) -> String {
    let schema = SCHEMA_YAML.replace("      - ", "        - ");
    format!(
        "    files:\n      path: {}\n      format: jsonl\n      schema:\n{schema}      max_files_per_batch: 1\n      total_files: {FILES}\n",
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_without_an_event_time_leave_an_outer_join_at_once_padded_and_counted() {
    let cluster = Cluster::new("stream-join-null-time");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let root = cluster.root().to_path_buf();
    for s in ["o", "p"] {
        std::fs::create_dir_all(root.join(s)).unwrap();
        for n in 0..FILES {
            inputs::write(&root.join(s), &format!("{n:02}.jsonl"), "jsonl", &file(n));
        }
    }
    let sink = cluster.sink_path("full");
    let spec = format!(
        "name: full\nsources:\n  o:\n{}  p:\n{}watermarks:\n  o: {{column: ts, delay_ms: 2000}}\n  p: {{column: ts, delay_ms: 2000}}\nstate_partitions: 2\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {FULL:?}\n",
        source(&root.join("o")),
        source(&root.join("p")),
        sink.display()
    );
    client.submit(&spec).await.expect("submitted");
    let status = client
        .wait_state("full", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");

    let all = concat(&(0..FILES).map(file).collect::<Vec<_>>());
    let want = expected_with(FULL, Vec::new(), &[("o", all.clone()), ("p", all.clone())]).await;
    let got = committed(&sink).await;
    let padded = |rows: &[String], side: &str| {
        rows.iter()
            .filter(|r| !r.contains(&format!("\"{side}\"")))
            .count()
    };
    eprintln!(
        "oracle {} rows ({} without an order, {} without a payment); sink {} rows",
        want.len(),
        padded(&want, "oid"),
        padded(&want, "pid"),
        got.len()
    );
    assert_eq!(got.len(), want.len(), "row counts differ");
    assert!(got == want, "the sink differs from the oracle");

    // Every row without a time that the subqueries keep, of either side.
    let times = all
        .column(1)
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .unwrap();
    let ids = all
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap();
    let untimed = (0..all.num_rows())
        .filter(|&i| times.is_null(i))
        .map(|i| u64::from(ids.value(i) % 4 != 1) + u64::from(ids.value(i) % 4 != 2))
        .sum::<u64>();
    assert!(untimed > 10, "the input has rows without a time");
    let ckpt = cluster.checkpoint_root();
    let progress = log_records::<serde_json::Value>(&ckpt, "full", Log::Progress);
    let n = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap_or(0);
    let counted: u64 = progress
        .iter()
        .map(|(_, p)| n(p, "rows_without_event_time"))
        .sum();
    assert_eq!(
        counted, untimed,
        "the progress counts every row without a time"
    );
    // The batch after the end of the input runs with the watermark at the
    // end of time: no row is left in the state, with or without a time.
    let states: Vec<u64> = progress
        .iter()
        .map(|(_, p)| n(p, "state_rows_total"))
        .collect();
    eprintln!("state rows after each batch: {states:?}");
    assert_eq!(states.last(), Some(&0), "the state after the last batch");
}
