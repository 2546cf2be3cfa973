//! A task's output is capped (`--max-output-bytes-per-task`): a query that
//! makes far more output than input fails, naming the cap, instead of
//! filling the disk; nothing of it is committed.

use std::time::Duration;

use sluice_tests::{Cluster, DriverOpts, QueryState, Spec, files_under};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_past_the_task_cap_fails_the_query_naming_it() {
    let cluster = Cluster::new("output-cap");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--max-output-bytes-per-task".into(), "1000000".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    // 40 rows, each into a million: 10 rows and 250 MB of output a task.
    let spec = Spec::new("amplified", &cluster.sink_path("amplified"))
        .total_rows(40)
        .rows_per_second(1_000_000)
        .sql("SELECT value, unnest(range(1000000)) AS u FROM input");
    client.submit(&spec.to_yaml()).await.expect("submit");
    let failed = client
        .wait_state("amplified", QueryState::Failed, Duration::from_secs(60))
        .await;
    for w in ["--max-output-bytes-per-task", "1000000 bytes per task"] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    assert_eq!(failed.last_committed_batch, -1, "{failed:#?}");
    let written: u64 = files_under(&cluster.sink_path("amplified"))
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    assert!(
        written < 20_000_000,
        "{written} bytes reached the sink directory"
    );
}
