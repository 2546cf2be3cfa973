//! Event-time windows and watermarks through a real cluster: tumbling and
//! sliding windows, append mode (each window once, final, after the
//! watermark passes its end), update mode with state evicted behind the
//! watermark, and late rows dropped and counted.

use std::time::Duration;

use sluice_tests::inputs::{self, rows};
use sluice_tests::oracle::{rate_input, rate_start_ms};
use sluice_tests::stateful::{assert_append, assert_matches, batches, latest, oracle, rate_spec};
use sluice_tests::{Cluster, QueryState};

const RPS: u64 = 20_000;
const TOTAL: u64 = 60_000;

const APPEND: &str = "SELECT window(timestamp_ms, '500 milliseconds') AS w, value % 10 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY window(timestamp_ms, '500 milliseconds'), value % 10";
const APPEND_ORACLE: &str = "SELECT named_struct('start', date_bin(INTERVAL '500 milliseconds', timestamp_ms), 'end', date_bin(INTERVAL '500 milliseconds', timestamp_ms) + INTERVAL '500 milliseconds') AS w, value % 10 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY 1, 2";

const SLIDING: &str = "SELECT hop(timestamp_ms, '1 second', '500 milliseconds') AS w, count(*) AS n FROM input GROUP BY hop(timestamp_ms, '1 second', '500 milliseconds')";
const SLIDING_ORACLE: &str = "SELECT named_struct('start', s, 'end', s + INTERVAL '1 second') AS w, count(*) AS n FROM (SELECT unnest(make_array(date_bin(INTERVAL '500 milliseconds', timestamp_ms) - INTERVAL '500 milliseconds', date_bin(INTERVAL '500 milliseconds', timestamp_ms))) AS s FROM input) GROUP BY s";

const BOUNDED: &str = "SELECT window(timestamp_ms, '200 milliseconds') AS w, value % 10 AS k, count(*) AS n FROM input GROUP BY window(timestamp_ms, '200 milliseconds'), value % 10";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_are_emitted_once_final_and_state_stays_bounded() {
    let cluster = Cluster::new("windowed");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let queries = [
        ("append", APPEND, "output_mode: append"),
        ("sliding", SLIDING, "output_mode: update"),
        ("bounded", BOUNDED, "output_mode: update"),
    ];
    for (name, sql, mode) in queries {
        let sink = cluster.sink_path(name);
        let spec = rate_spec(name, &sink, (RPS, TOTAL), sql, &[mode]);
        client
            .submit(&spec)
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}"));
    }
    // State rows of the bounded query while it runs.
    let mut most_state = 0;
    loop {
        let s = client.get("bounded").await.unwrap();
        if let Some(p) = &s.latest_progress {
            most_state = most_state.max(p.state_rows_total);
        }
        if s.state != QueryState::Running as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let root = cluster.checkpoint_root();
    for (name, _, _) in queries {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
    }

    // Append: each window once, with its final value, in a batch whose
    // watermark has passed its end; every window the last watermark
    // passed is there.
    let sink = cluster.sink_path("append");
    assert_append(
        &root,
        "append",
        &sink,
        APPEND_ORACLE,
        (RPS, TOTAL),
        &["w", "k"],
    )
    .await;

    // Sliding, update mode: the latest row of each window is its final
    // value (no row is late, so eviction loses nothing).
    let input = rate_input(rate_start_ms(&root, "sliding"), RPS, TOTAL);
    let want = oracle(SLIDING_ORACLE, input, &[]).await;
    let got = batches(&cluster.sink_path("sliding")).await;
    assert_matches("sliding", "update", &got, &["w"], &want);

    // Bounded: some 150 groups (15 windows of 10 keys) went through the
    // state, a few windows at a time.
    let input = rate_input(rate_start_ms(&root, "bounded"), RPS, TOTAL);
    let all = "SELECT date_bin(INTERVAL '200 milliseconds', timestamp_ms) AS s, value % 10 AS k FROM input GROUP BY 1, 2";
    let want = oracle(all, input, &[]).await.len();
    let groups = latest(&batches(&cluster.sink_path("bounded")).await, &["w", "k"]).len();
    assert_eq!(groups, want, "every group was emitted");
    assert!(groups >= 150);
    assert!(
        most_state > 0 && most_state <= 80,
        "state rows peaked at {most_state}"
    );
    let end = client
        .get("bounded")
        .await
        .unwrap()
        .latest_progress
        .unwrap();
    assert!(end.watermark_ms.is_some(), "{end:?}");
    assert!(end.state_rows_total <= 80, "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_rows_are_dropped_and_counted() {
    let cluster = Cluster::new("late-rows");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let dir = cluster.root().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    // One file a batch, in name order; f-2's rows are older than the
    // watermark that f-1 moves past them.
    let files = [2u64, 5, 0, 6];
    for (i, f) in files.iter().enumerate() {
        inputs::write(&dir, &format!("f-{i}.csv"), "csv", &rows(*f, 100));
    }
    let sql = "SELECT window(ts, '60 seconds') AS w, count(*) AS n, min(id) AS lo FROM input GROUP BY window(ts, '60 seconds')";
    let sink = cluster.sink_path("late");
    let spec = inputs::spec("late", &dir, "csv", &sink, sql, files.len() as u64)
        .replace("max_files_per_batch: 2", "max_files_per_batch: 1")
        + "watermark: {column: ts, delay_ms: 1000}\n";
    client.submit(&spec).await.expect("late submits");
    let status = client
        .wait_state("late", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let progress = client.progress("late").await.unwrap();
    let dropped: Vec<u64> = progress
        .iter()
        .map(|p| p.rows_dropped_by_watermark)
        .collect();
    // The last batch reads nothing: it ends the input.
    assert_eq!(dropped, [0, 0, 100, 0, 0], "{progress:#?}");
    let on_time: Vec<_> = [2u64, 5, 6].iter().map(|f| rows(*f, 100)).collect();
    let oracle_sql = "SELECT named_struct('start', date_bin(INTERVAL '60 seconds', ts), 'end', date_bin(INTERVAL '60 seconds', ts) + INTERVAL '60 seconds') AS w, count(*) AS n, min(id) AS lo FROM input GROUP BY 1";
    let want = oracle(oracle_sql, on_time, &[]).await;
    let got = batches(&sink).await;
    assert_matches("late", "update", &got, &["w"], &want);
}
