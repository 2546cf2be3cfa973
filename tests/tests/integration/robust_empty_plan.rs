//! A query whose plan DataFusion empties (a filter that is never true)
//! still reads its whole input: it finishes, having read every row, and
//! writes nothing, as the oracle says; it is never FAILED by a task that
//! "read 0 rows of the N planned".

use std::time::Duration;

use sluice_tests::oracle::{committed, expected, rate_input, rate_start_ms};
use sluice_tests::{Cluster, QueryState, Spec};

const TOTAL: u64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_with_a_filter_that_is_never_true_finishes_and_writes_nothing() {
    let cluster = Cluster::new("empty-plan");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let queries = [
        ("one-is-zero", "SELECT * FROM input WHERE 1 = 0", None),
        ("false", "SELECT value FROM input WHERE false", None),
        (
            "grouped",
            "SELECT value % 3 AS k, count(*) AS n FROM input WHERE false GROUP BY value % 3",
            Some("output_mode: update"),
        ),
    ];
    for (name, sql, extra) in queries {
        let mut spec = Spec::new(name, &cluster.sink_path(name))
            .total_rows(TOTAL)
            .rows_per_second(3_000)
            .sql(sql);
        if let Some(line) = extra {
            spec = spec.with(line);
        }
        client.submit(&spec.to_yaml()).await.expect("submit");
    }
    for (name, sql, _) in queries {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(60))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let read: u64 = client
            .progress(name)
            .await
            .expect("progress")
            .iter()
            .map(|p| p.num_input_rows)
            .sum();
        assert_eq!(read, TOTAL, "{name}: every input row is read");
        let start = rate_start_ms(&cluster.checkpoint_root(), name);
        let want = expected(sql, rate_input(start, 3_000, TOTAL)).await;
        assert!(want.is_empty(), "{name}: the oracle writes nothing");
        assert_eq!(committed(&cluster.sink_path(name)).await, want, "{name}");
    }
}
