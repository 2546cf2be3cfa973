//! Stateless SQL through a real cluster: for each query shape, the rows the
//! sink committed equal, as multisets, DataFusion's result over the same
//! input computed here in one piece.

use std::time::Duration;

use sluice_tests::oracle::{committed, expected, rate_input, rate_start_ms};
use sluice_tests::{Cluster, QueryState, Spec};

const TOTAL: u64 = 3000;
const RPS: u64 = 3000;

const SHAPES: &[(&str, &str)] = &[
    ("all", "SELECT * FROM input"),
    (
        "project",
        "SELECT value, value % 7 AS m, CAST(value AS VARCHAR) AS s, \
         CASE WHEN value % 3 = 0 THEN 'fizz' WHEN value % 5 = 0 THEN 'buzz' ELSE 'none' END AS kind \
         FROM input",
    ),
    (
        "filter",
        "SELECT value, upper(concat('v', CAST(value AS VARCHAR))) AS label, sqrt(CAST(value AS DOUBLE)) AS root, \
         date_trunc('second', timestamp_ms) AS second, regexp_like(CAST(value AS VARCHAR), '^1') AS ones \
         FROM input WHERE value % 10 < 3 AND value > 100",
    ),
    (
        "unnest",
        "SELECT value, unnest(string_to_array(concat(CAST(value % 3 AS VARCHAR), ',x'), ',')) AS part \
         FROM input WHERE value % 2 = 0",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_shape_commits_what_datafusion_computes_in_one_piece() {
    let cluster = Cluster::new("sql-oracle");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    for (name, sql) in SHAPES {
        let spec = Spec::new(name, &cluster.sink_path(name))
            .partitions(3)
            .rows_per_second(RPS)
            .total_rows(TOTAL)
            .max_rows_per_batch(700)
            .interval_ms(0)
            .sql(sql);
        client
            .submit(&spec.to_yaml())
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}"));
    }
    for (name, sql) in SHAPES {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(90))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let start = rate_start_ms(&cluster.checkpoint_root(), name);
        let want = expected(sql, rate_input(start, RPS, TOTAL)).await;
        let got = committed(&cluster.sink_path(name)).await;
        assert!(!want.is_empty(), "{name}: the oracle has rows");
        assert_eq!(got.len(), want.len(), "{name}: row counts differ");
        assert!(got == want, "{name}: the sink differs from the oracle");
    }
}
