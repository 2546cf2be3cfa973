//! Damaged checkpoints are reported, not hidden: after a restart, a query
//! whose `metadata` was deleted is listed as FAILED naming that file, and a
//! committed `offsets/N` that was truncated fails its query naming that
//! file. The other query runs on, and nothing is deleted.

use sluice_common::checkpoint::{Log, Record};
use std::time::Duration;

use sluice_tests::{Cluster, QueryState, Spec, latest_entry, query_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_metadata_and_a_truncated_committed_plan_are_reported() {
    let cluster = Cluster::new("damaged");
    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    for name in ["nometa", "trunc", "healthy"] {
        let spec = Spec::new(name, &cluster.sink_path(name))
            .total_rows(600)
            .rows_per_second(2000);
        client.submit(&spec.to_yaml()).await.expect("submit");
    }
    for name in ["nometa", "trunc", "healthy"] {
        client
            .wait_state(name, QueryState::Finished, Duration::from_secs(60))
            .await;
    }
    driver.kill();

    let root = cluster.checkpoint_root();
    let metadata = query_dir(&root, "nometa").join(Record::Metadata.rel());
    std::fs::remove_file(&metadata).unwrap();
    let (n, offsets) = latest_entry(&root, "trunc", Log::Offsets).expect("offsets");
    let (m, _) = latest_entry(&root, "trunc", Log::Commits).expect("commits");
    assert_eq!(n, m, "a finished query's latest plan is committed");
    let bytes = std::fs::read(&offsets).unwrap();
    std::fs::write(&offsets, &bytes[..bytes.len() / 2]).unwrap();

    driver.restart_ready().await;
    let status = client
        .wait_for("nometa", "listed", Duration::from_secs(30), |_| true)
        .await;
    assert_eq!(status.state, QueryState::Failed as i32, "{status:?}");
    assert!(
        status.error.contains(metadata.to_str().unwrap()),
        "the error must name {}: {status:?}",
        metadata.display()
    );
    let listed: Vec<String> = client
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert!(listed.contains(&"nometa".to_string()), "{listed:?}");

    let status = client
        .wait_state("trunc", QueryState::Failed, Duration::from_secs(30))
        .await;
    let name = offsets.file_name().unwrap().to_str().unwrap();
    assert!(
        status.error.contains(name) && status.error.contains("offsets"),
        "the error must name {}: {status:?}",
        offsets.display()
    );
    client
        .wait_state("healthy", QueryState::Finished, Duration::from_secs(30))
        .await;
    assert!(offsets.exists(), "nothing is deleted");
}
