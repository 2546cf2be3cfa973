//! FAILED is terminal: a query that failed stays FAILED, with its error,
//! when the driver restarts (it is not run again, here with no executor
//! to run it), until it is resubmitted with the same spec, which runs it
//! again from its checkpoint.

use sluice_common::checkpoint::Record;
use std::time::Duration;

use sluice_tests::{Cluster, QueryState, READY_TIMEOUT, Spec, query_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_query_stays_failed_across_restarts_until_resubmitted() {
    let cluster = Cluster::new("failed-terminal");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let spec = Spec::new("poison", &cluster.sink_path("poison"))
        .sql("SELECT 10 / (value - value) AS boom FROM input");
    client.submit(&spec.to_yaml()).await.expect("submit");
    let failed = client
        .wait_state("poison", QueryState::Failed, Duration::from_secs(60))
        .await;
    assert!(failed.error.contains("Divide by zero"), "{failed:#?}");
    let marker = query_dir(&cluster.checkpoint_root(), "poison").join(Record::Failed.rel());
    assert!(marker.exists(), "no failure marker at {}", marker.display());

    executor.process().kill();
    driver.process().kill();
    driver.process().restart();
    driver.wait_ready(READY_TIMEOUT).await;
    let reloaded = client
        .wait_state("poison", QueryState::Failed, Duration::from_secs(30))
        .await;
    assert_eq!(reloaded.error, failed.error, "{reloaded:#?}");

    client
        .submit(&spec.to_yaml())
        .await
        .expect("resubmitting a FAILED query runs it again");
    let resumed = client.get("poison").await.expect("get");
    assert_eq!(resumed.state, QueryState::Running as i32, "{resumed:#?}");
    assert!(!marker.exists(), "the failure marker outlived the resubmit");
    driver.process().kill();
    driver.process().restart();
    driver.wait_ready(READY_TIMEOUT).await;
    let again = client
        .wait_for("poison", "loaded", Duration::from_secs(30), |_| true)
        .await;
    assert_eq!(again.state, QueryState::Running as i32, "{again:#?}");
}
