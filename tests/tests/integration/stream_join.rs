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
