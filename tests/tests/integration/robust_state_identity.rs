//! State files carry their identity: a delta copied over another
//! partition's (valid bytes, wrong place) is refused when the state is
//! loaded, failing the query with the file named, instead of silently
//! merging another partition's counts.

use sluice_common::checkpoint::STATE_DIR;
use std::path::PathBuf;
use std::time::Duration;

use sluice_tests::{Cluster, QueryState, Spec, query_dir};

/// `state/<operator>/<partition>` of the query's one operator.
fn partition_dir(root: &std::path::Path, query: &str, partition: u32) -> PathBuf {
    let state = query_dir(root, query).join(STATE_DIR);
    let operator = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .next()
        .expect("a state operator directory")
        .path();
    operator.join(format!("{partition:05}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_copied_from_another_partition_fails_the_query_naming_it() {
    let cluster = Cluster::new("state-identity");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let spec = Spec::new("counts", &cluster.sink_path("counts"))
        .sql("SELECT value % 100 AS k, count(*) AS n FROM input GROUP BY value % 100")
        .with("state_partitions: 2");
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_committed("counts", 3, Duration::from_secs(60))
        .await;
    executor.process().kill();

    // Every file of partition 1 replaced by partition 0's file of that name.
    let root = cluster.checkpoint_root();
    let (p0, p1) = (
        partition_dir(&root, "counts", 0),
        partition_dir(&root, "counts", 1),
    );
    let mut replaced = Vec::new();
    for entry in std::fs::read_dir(&p1).unwrap().flatten() {
        let from = p0.join(entry.file_name());
        if from.exists() {
            std::fs::copy(&from, entry.path()).unwrap();
            replaced.push(entry.file_name().to_string_lossy().to_string());
        }
    }
    assert!(!replaced.is_empty(), "no file of partition 1 to replace");

    let _fresh = cluster.start_executor(&drivers);
    let failed = client
        .wait_state("counts", QueryState::Failed, Duration::from_secs(60))
        .await;
    for w in ["00001", "holds the state of", "partition 0", "partition 1"] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
}
