//! Stateful queries through a real cluster: aggregations in update and
//! complete mode, DISTINCT, count(DISTINCT) and approx_distinct, over the
//! rate source and the file source. Each batch runs map tasks, a shuffle
//! and a reduce task per state partition; the sink, read batch by batch,
//! holds what DataFusion computes over all of the input in one piece.

use sluice_common::checkpoint::SHUFFLE_DIR;
use std::collections::BTreeSet;
use std::time::Duration;

use sluice_tests::inputs::{self, rows};
use sluice_tests::oracle::{rate_input, rate_start_ms};
use sluice_tests::stateful::{assert_matches, batches, key_of, oracle};
use sluice_tests::{Cluster, DriverOpts, QueryState, Spec, offset_records};

const TOTAL: u64 = 20_000;
const RPS: u64 = 1_000_000;

struct Case {
    name: &'static str,
    /// update | complete | distinct (a DISTINCT in update mode)
    mode: &'static str,
    keys: &'static [&'static str],
    sql: &'static str,
    extra: &'static [&'static str],
}

const RATE: &[Case] = &[
    Case {
        name: "update-agg",
        mode: "update",
        keys: &["k"],
        sql: "SELECT value % 100 AS k, count(*) AS n, sum(value) AS s, min(value) AS lo, max(value) AS hi, avg(value) AS a FROM input GROUP BY value % 100",
        extra: &[],
    },
    Case {
        name: "complete-agg",
        mode: "complete",
        keys: &["k"],
        sql: "SELECT value % 7 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 7",
        extra: &["output_mode: complete", "state_partitions: 3"],
    },
    Case {
        name: "distinct",
        mode: "distinct",
        keys: &["k"],
        sql: "SELECT DISTINCT value % 50 AS k FROM input WHERE value % 3 = 0",
        extra: &[],
    },
    Case {
        name: "count-distinct",
        mode: "update",
        keys: &["k"],
        sql: "SELECT value % 10 AS k, count(DISTINCT value % 37) AS d, approx_distinct(value % 101) AS ad FROM input GROUP BY value % 10",
        extra: &["state_partitions: 2"],
    },
    Case {
        name: "global-having",
        mode: "update",
        keys: &[],
        sql: "SELECT count(*) AS n, sum(value) AS s FROM input HAVING count(*) > 10",
        extra: &[],
    },
];

const FILES_SQL: &str =
    "SELECT city, count(*) AS n, sum(id) AS s, max(score) AS top FROM input GROUP BY city";
const FILES: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_queries_commit_what_datafusion_computes_in_one_piece() {
    let cluster = Cluster::new("stateful-oracle");
    let driver = cluster.start_driver_with(DriverOpts {
        // Several map tasks a batch, and several files' ranges.
        extra_args: vec![
            "--max-rows-per-task".into(),
            "1000".into(),
            "--max-bytes-per-task".into(),
            "4000".into(),
        ],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    for case in RATE {
        let mut spec = Spec::new(case.name, &cluster.sink_path(case.name))
            .partitions(4)
            .rows_per_second(RPS)
            .total_rows(TOTAL)
            .max_rows_per_batch(3000)
            .interval_ms(0)
            .sql(case.sql);
        for line in case.extra {
            spec = spec.with(line);
        }
        client
            .submit(&spec.to_yaml())
            .await
            .unwrap_or_else(|e| panic!("{}: submit refused: {e}", case.name));
    }
    let dir = cluster.root().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    for n in 0..FILES {
        inputs::write(&dir, &format!("f-{n}.csv"), "csv", &rows(n, 300));
    }
    let files_sink = cluster.sink_path("files-agg");
    let spec = inputs::spec("files-agg", &dir, "csv", &files_sink, FILES_SQL, FILES);
    client.submit(&spec).await.expect("files-agg submits");

    for case in RATE {
        let status = client
            .wait_state(case.name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{}: {status:#?}", case.name);
        let progress = status.latest_progress.expect("progress");
        assert!(
            progress.state_rows_total > 0,
            "{}: state rows reported",
            case.name
        );
        assert!(
            progress.state_bytes > 0,
            "{}: state bytes reported",
            case.name
        );
        let root = cluster.checkpoint_root();
        let input = rate_input(rate_start_ms(&root, case.name), RPS, TOTAL);
        let want = oracle(case.sql, input, &[]).await;
        let got = batches(&cluster.sink_path(case.name)).await;
        assert!(
            got.len() >= 7,
            "{}: a batch per 3000 rows: {}",
            case.name,
            got.len()
        );
        assert_matches(case.name, case.mode, &got, case.keys, &want);
        // Shuffle files go once their batch commits.
        let shuffle = sluice_tests::query_dir(&root, case.name).join(SHUFFLE_DIR);
        let left = sluice_tests::files_under(&shuffle);
        assert!(
            left.len() <= 2 * 5,
            "{}: shuffle files left: {left:?}",
            case.name
        );
    }

    // Update mode emits exactly the groups each batch's input touched.
    let plans = offset_records(&cluster.checkpoint_root(), "update-agg");
    let got = batches(&cluster.sink_path("update-agg")).await;
    for plan in plans {
        let (start, end) = (plan.inputs.start_value(), plan.inputs.end_value());
        let touched: BTreeSet<String> = (start..end).map(|v| (v % 100).to_string()).collect();
        let emitted: BTreeSet<String> = got
            .get(&plan.batch_id)
            .map(|rows| {
                rows.iter()
                    .map(|r| key_of(r, &["k"]).replace('"', ""))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            emitted, touched,
            "batch {} emits the groups it changed",
            plan.batch_id
        );
    }

    let status = client
        .wait_state("files-agg", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "files-agg: {status:#?}");
    let input: Vec<_> = (0..FILES).map(|n| rows(n, 300)).collect();
    let want = oracle(FILES_SQL, input, &[]).await;
    let got = batches(&files_sink).await;
    assert!(got.len() >= 2, "files-agg: two files a batch");
    assert_matches("files-agg", "update", &got, &["city"], &want);
}
