//! One expression cannot take an executor down: a query whose function
//! would build gigabytes from a number (`repeat('x', 1000000000)`) fails,
//! naming the function and the limit, while the executor lives on and
//! another query on it goes on committing.

use std::time::Duration;

use sluice_tests::{Cluster, QueryState, Spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_that_would_build_gigabytes_fails_only_its_query() {
    let cluster = Cluster::new("poison-sql");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let steady = Spec::new("steady", &cluster.sink_path("steady"));
    client
        .submit(&steady.to_yaml())
        .await
        .expect("submit steady");
    let poison = Spec::new("poison", &cluster.sink_path("poison"))
        .sql("SELECT value, repeat('x', 1000000000) AS s FROM input");
    client
        .submit(&poison.to_yaml())
        .await
        .expect("submit poison");
    let failed = client
        .wait_state("poison", QueryState::Failed, Duration::from_secs(60))
        .await;
    for w in [
        "repeat(...) would build",
        "above the limit of 268435456 bytes per call",
    ] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    let now = client
        .get("steady")
        .await
        .expect("get")
        .last_committed_batch;
    client
        .wait_committed("steady", now + 5, Duration::from_secs(60))
        .await;
    assert!(executor.process().is_running(), "the executor died");
    assert_eq!(executor.process().starts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_memory_pool_fails_its_query_naming_the_flag() {
    let cluster = Cluster::new("task-memory");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor_with(
        &drivers,
        sluice_tests::ExecutorOpts {
            extra_args: vec!["--max-task-memory-bytes".into(), "1000000".into()],
            ..Default::default()
        },
    );
    // A join's build side: a static table of 100,000 rows, several MB in
    // a hash table, past the executor's 1 MB pool per task.
    let table = cluster.root().join("big.csv");
    let rows: String = (0..100_000).map(|i| format!("{i},name-{i}\n")).collect();
    std::fs::write(&table, format!("k,name\n{rows}")).unwrap();
    let spec = Spec::new("joined", &cluster.sink_path("joined"))
        .total_rows(1_000)
        .sql("SELECT value, b.name FROM big b JOIN input ON CAST(value AS BIGINT) = b.k")
        .with(&format!(
            "tables:\n  big:\n    path: {:?}\n    format: csv\n    schema:\n      - {{name: k, type: bigint}}\n      - {{name: name, type: string}}",
            table.display().to_string()
        ));
    let mut client = cluster.client(&drivers);
    client.submit(&spec.to_yaml()).await.expect("submit");
    let failed = client
        .wait_state("joined", QueryState::Failed, Duration::from_secs(60))
        .await;
    for w in ["ran out of its memory", "--max-task-memory-bytes"] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    assert!(executor.process().is_running(), "the executor died");
}
