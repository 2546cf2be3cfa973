//! A query runs to FINISHED on a standalone driver and one executor, and
//! its sink is exactly-once; the CLI agrees (`status`, `wait`, `list`).

use std::time::Duration;

use sluice_tests::{
    Cluster, QueryState, Spec, assert_epochs_non_decreasing, assert_exactly_once, json_has_query,
};

const TOTAL: u64 = 4000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_runs_to_finished_exactly_once() {
    let cluster = Cluster::new("finish");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);

    let sink = cluster.sink_path("finish");
    let spec = Spec::new("finish", &sink)
        .partitions(4)
        .rows_per_second(2000)
        .total_rows(TOTAL)
        .interval_ms(100);
    let file = cluster.write_spec(&spec.to_yaml());
    let submit = cluster
        .cli(&drivers, &["submit", file.to_str().unwrap()])
        .await;
    submit.assert_success();
    let id = submit.stdout.trim().to_string();
    assert!(!id.is_empty(), "submit prints the query id: {submit}");

    let mut client = cluster.client(&drivers);
    let status = client
        .wait_state("finish", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert_eq!(status.id, id, "the id printed by submit is the query's id");
    assert!(status.error.is_empty(), "no error: {status:#?}");

    let report = assert_exactly_once(&sink, TOTAL).await;
    assert!(report.committed_batches >= 1);

    let out = cluster.cli(&drivers, &["status", "finish", "--json"]).await;
    out.assert_success();
    let json = out.json();
    assert_eq!(json["state"], "FINISHED", "{out}");
    assert_eq!(json["name"], "finish", "{out}");
    assert_eq!(json["id"], id.as_str(), "{out}");
    let last = json["last_committed_batch"].as_i64();
    assert!(last.is_some_and(|b| b >= 0), "{out}");
    assert!(
        json.get("error").is_some(),
        "status JSON has an error field: {out}"
    );

    // By id as well as by name.
    let out = cluster.cli(&drivers, &["status", &id, "--json"]).await;
    out.assert_success();
    assert_eq!(out.json()["name"], "finish", "{out}");

    cluster
        .cli(&drivers, &["wait", "finish", "--timeout-s", "30"])
        .await
        .assert_code(0);

    let out = cluster.cli(&drivers, &["list", "--json"]).await;
    out.assert_success();
    assert!(json_has_query(&out.json(), "finish"), "{out}");

    let epochs = assert_epochs_non_decreasing(&cluster.checkpoint_root(), "finish");
    assert_eq!(
        epochs.last().map(|e| e.0 as i64),
        last,
        "the last commit record is the last committed batch"
    );
}
