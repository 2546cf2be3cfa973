//! Joins of two streams through a real cluster: orders and payments,
//! two file streams whose files arrive while the queries run, joined on
//! their id within an event-time bound, an inner join and a left outer
//! join, while the driver and an executor are SIGKILLed at random moments
//! and restarted (the seeded rng picks; replay with `SLUICE_TEST_SEED=N`).
//!
//! Afterwards the inner join's sink equals DataFusion's join over all the
//! files at once, and the outer join's sink equals DataFusion's left join:
//! every match, and every order without one exactly once, NULL-padded
//! (the last files move the watermark past every order's bound).

use sluice_common::checkpoint::{Log, Record};
use std::path::Path;
use std::time::Duration;

use arrow_array::RecordBatch;
use sluice_tests::inputs::{self, SCHEMA_YAML};
use sluice_tests::oracle::{committed, concat, expected_with};
use sluice_tests::{Cluster, QueryState, READY_TIMEOUT, test_rng};

const ROWS: u64 = 150;
/// Four files of rows, then one far later in event time, then one later
/// still: the batch that reads the last runs with a watermark past every
/// earlier row's bound.
const FILES: u64 = 6;

/// File `n` of either stream: the same ids and event times in both, so
/// an order's payment is at its own time.
fn file(n: u64) -> RecordBatch {
    match n {
        0..4 => inputs::rows(n, ROWS),
        4 => inputs::rows(20_000, 1),
        _ => inputs::rows(30_001, 1),
    }
}

const INNER: &str = "SELECT o.id, o.city, p.score FROM o JOIN p ON o.id = p.id \
     AND p.ts BETWEEN o.ts - INTERVAL '5 seconds' AND o.ts + INTERVAL '10 seconds' \
     WHERE p.id % 3 <> 0";
const LEFT: &str = "SELECT o.id, o.city, p.score FROM o LEFT JOIN \
     (SELECT id, ts, score FROM p WHERE id % 3 <> 0) p ON o.id = p.id \
     AND p.ts BETWEEN o.ts - INTERVAL '5 seconds' AND o.ts + INTERVAL '10 seconds'";

fn source(dir: &Path) -> String {
    let schema = SCHEMA_YAML.replace("      - ", "        - ");
    format!(
        "    files:\n      path: {}\n      format: jsonl\n      schema:\n{schema}      max_files_per_batch: 1\n      total_files: {FILES}\n",
        dir.display()
    )
}

fn spec(name: &str, root: &Path, sink: &Path, sql: &str) -> String {
    format!(
        "name: {name}\nsources:\n  o:\n{}  p:\n{}watermarks:\n  o: {{column: ts, delay_ms: 2000}}\n  p: {{column: ts, delay_ms: 2000}}\nstate_partitions: 3\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {sql:?}\n",
        source(&root.join("o")),
        source(&root.join("p")),
        sink.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_of_two_streams_are_exact_through_driver_and_executor_kills() {
    let mut rng = test_rng();
    let cluster = Cluster::new("stream-join");
    let driver = cluster.start_driver();
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let victim = cluster.start_executor(&drivers);
    let _survivor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let root = cluster.root().to_path_buf();
    for s in ["o", "p"] {
        std::fs::create_dir_all(root.join(s)).unwrap();
    }
    let write = |n: u64| {
        for s in ["o", "p"] {
            inputs::write(&root.join(s), &format!("{n:02}.jsonl"), "jsonl", &file(n));
        }
    };
    write(0);
    for (name, sql) in [("inner", INNER), ("left", LEFT)] {
        let text = spec(name, &root, &cluster.sink_path(name), sql);
        client
            .submit(&text)
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}\n{text}"));
    }
    // One kill after each new file: the driver, an executor, both, or
    // none, in an order the seed picks, at a moment it picks.
    let mut kills = [
        (true, false),
        (false, true),
        (true, true),
        (false, false),
        (false, false),
    ];
    for i in (1..kills.len()).rev() {
        kills.swap(i, rng.between(0, i as u64) as usize);
    }
    for (n, (kill_driver, kill_executor)) in (1..FILES).zip(kills) {
        client
            .wait_committed("inner", n as i64 - 1, Duration::from_secs(60))
            .await;
        write(n);
        tokio::time::sleep(rng.millis(0, 150)).await;
        eprintln!("file {n}: kill driver {kill_driver}, executor {kill_executor}");
        if kill_driver {
            driver.kill();
        }
        if kill_executor {
            victim.kill();
        }
        tokio::time::sleep(rng.millis(0, 200)).await;
        if kill_executor {
            victim.restart();
        }
        if kill_driver {
            driver.restart_ready().await;
        }
    }
    assert_eq!(driver.starts(), 3, "the driver ran three times");
    let all = |_: &str| concat(&(0..FILES).map(file).collect::<Vec<_>>());
    for (name, sql) in [("inner", INNER), ("left", LEFT)] {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let want = expected_with(sql, Vec::new(), &[("o", all("o")), ("p", all("p"))]).await;
        let got = committed(&cluster.sink_path(name)).await;
        assert!(!want.is_empty(), "{name}: the oracle has rows");
        let unmatched = want.iter().filter(|r| !r.contains("score")).count();
        eprintln!("{name}: {} rows, {unmatched} without a match", want.len());
        if name == "left" {
            assert!(unmatched > 0, "the outer join has orders without a payment");
        }
        assert_eq!(got.len(), want.len(), "{name}: row counts differ");
        assert!(got == want, "{name}: the sink differs from the oracle");
    }
}

const RATE: u64 = 3_000;
const TOTAL: u64 = 36_000;
const BOUNDED: &str = "SELECT a.value, a.timestamp_ms AS a_ts, b.timestamp_ms AS b_ts \
     FROM a JOIN b ON a.value = b.value \
     AND b.timestamp_ms BETWEEN a.timestamp_ms - INTERVAL '1 second' AND a.timestamp_ms + INTERVAL '1 second'";

fn rate_join(name: &str, sink: &Path, sql: &str, watermarks: bool) -> String {
    let rate =
        format!("    rate: {{partitions: 2, rows_per_second: {RATE}, total_rows: {TOTAL}}}\n");
    let marks = match watermarks {
        true => {
            "watermarks:\n  a: {column: timestamp_ms, delay_ms: 500}\n  b: {column: timestamp_ms, delay_ms: 500}\n"
        }
        false => "",
    };
    format!(
        "name: {name}\nsources:\n  a:\n{rate}  b:\n{rate}{marks}trigger:\n  interval_ms: 200\nsink:\n  files:\n    path: {}\nsql: {sql:?}\n",
        sink.display()
    )
}

/// Every batch's state rows and input rows, from the query's progress
/// records.
fn state_rows(root: &Path, query: &str) -> Vec<(u64, u64)> {
    let dir = sluice_tests::query_dir(root, query).join(Log::Progress.dir());
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries
        .iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            let n = |f: &str| v[f].as_u64().unwrap_or(0);
            (n("state_rows_total"), n("num_input_rows"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_watermarks_and_a_bound_the_state_stays_bounded_while_keys_pass_through() {
    let cluster = Cluster::new("stream-join-bounded");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path("bounded");
    client
        .submit(&rate_join("bounded", &sink, BOUNDED, true))
        .await
        .expect("submitted");
    let status = client
        .wait_state("bounded", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let root = cluster.checkpoint_root();
    let start = |s: &str| {
        let path =
            sluice_tests::query_dir(&root, "bounded").join(Record::RateStart.rel_in(Some(s)));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        v["start_ms"].as_i64().unwrap()
    };
    let rows = |s: &str| concat(&sluice_tests::oracle::rate_input(start(s), RATE, TOTAL));
    let want = expected_with(BOUNDED, Vec::new(), &[("a", rows("a")), ("b", rows("b"))]).await;
    let got = committed(&sink).await;
    assert_eq!(want.len() as u64, TOTAL, "every row of a has its row of b");
    assert_eq!(got.len(), want.len(), "row counts differ");
    assert!(got == want, "the sink differs from the oracle");
    // Two streams of 36,000 rows passed through; after each batch the
    // state held the rows of about the bound (1 s each way), the
    // watermark's delay (0.5 s) and the batch itself: a slow batch, which
    // reads more rows, holds more, and the next ones fall back.
    let states = state_rows(&root, "bounded");
    eprintln!("(state rows, input rows) per batch: {states:?}");
    assert!(states.len() > 5, "many batches: {states:?}");
    assert!(states.iter().any(|s| s.0 > 0), "the join buffered rows");
    let window = 2 * RATE * 3;
    for (i, &(state, input)) in states.iter().enumerate() {
        let before = i.checked_sub(1).map_or(0, |j| states[j].1);
        assert!(
            state <= window + input + before,
            "batch {i}: {state} state rows, above the window's {window} and the last two batches' \
             {input} + {before} input rows: the state is not bounded"
        );
    }
    let last = states.len().saturating_sub(5);
    let tail = states[last..].iter().map(|s| s.0).max().unwrap_or(0);
    assert!(
        tail <= 2 * TOTAL / 4,
        "the state fell back: {tail} rows at the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_that_cannot_run_are_refused_naming_what_is_missing() {
    let cluster = Cluster::new("stream-join-refusals");
    let driver = cluster.start_ready_driver().await;
    let client = cluster.client(driver.addr());
    let sink = cluster.sink_path("out");
    let refused = |text: String| {
        let mut client = client.clone();
        async move {
            let e = client.submit(&text).await.expect_err("refused");
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
            e.message().to_string()
        }
    };
    let left = BOUNDED.replace("FROM a JOIN b", "FROM a LEFT JOIN b");
    let m = refused(rate_join("nowm", &sink, &left, false)).await;
    assert!(
        m.contains("left outer join of the streams `a` and `b`")
            && m.contains("a watermark on `a`")
            && m.contains("a watermark on `b`"),
        "{m}"
    );
    let unbounded = "SELECT a.value, b.value AS v FROM a FULL JOIN b ON a.value = b.value";
    let m = refused(rate_join("nobound", &sink, unbounded, true)).await;
    assert!(
        m.contains("full outer join") && m.contains("an event-time bound"),
        "{m}"
    );
    let half = "SELECT a.value FROM a LEFT JOIN b ON a.value = b.value AND b.timestamp_ms >= a.timestamp_ms";
    let m = refused(rate_join("half", &sink, half, true)).await;
    assert!(m.contains("a bound closed at both ends"), "{m}");
    let top = "SELECT * FROM (SELECT a.value, ROW_NUMBER() OVER (PARTITION BY a.value % 10 ORDER BY b.value) AS rn FROM a JOIN b ON a.value = b.value) WHERE rn <= 2";
    let agg = format!("SELECT count(*) AS n FROM ({top})");
    let m = refused(rate_join("agg", &sink, &agg, true)).await;
    assert!(
        m.contains("the top-N `top_n` feeds `aggregate`")
            && m.contains("it can only be the last stateful operator"),
        "{m}"
    );
    let semi = "SELECT value FROM a WHERE value IN (SELECT value FROM b)";
    let m = refused(rate_join("semi", &sink, semi, true)).await;
    assert!(
        m.contains("a subquery joining the streams `a` and `b` (IN, EXISTS"),
        "{m}"
    );
}
