//! One of two executors is SIGKILLed while a batch is in flight (its
//! `offsets/N` exists and its `commits/N` does not yet). The batch commits
//! anyway, on the other executor, and the sink is exactly-once.

use sluice_common::checkpoint::Log;
use std::time::{Duration, Instant};

use sluice_tests::{
    Cluster, QueryState, Spec, assert_epochs_non_decreasing, assert_exactly_once, latest_entry,
};

const TOTAL: u64 = 12_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_killed_mid_batch_work_moves_to_the_other() {
    let cluster = Cluster::new("executor-crash");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let victim = cluster.start_executor(&drivers);
    let survivor = cluster.start_executor(&drivers);

    let sink = cluster.sink_path("exec");
    let spec = Spec::new("exec", &sink)
        .partitions(4)
        .rows_per_second(4000)
        .total_rows(TOTAL)
        .interval_ms(50)
        .max_rows_per_batch(1000);
    let mut client = cluster.client(&drivers);
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_committed("exec", 0, Duration::from_secs(30))
        .await;

    // Kill the moment a batch is planned but not committed.
    let root = cluster.checkpoint_root();
    let deadline = Instant::now() + Duration::from_secs(20);
    let in_flight = loop {
        let planned = latest_entry(&root, "exec", Log::Offsets).map(|e| e.0);
        let committed = latest_entry(&root, "exec", Log::Commits).map(|e| e.0);
        if let Some(n) = planned.filter(|&n| Some(n) != committed) {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "never saw a batch in flight (planned {planned:?}, committed {committed:?})"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    victim.kill();
    eprintln!(
        "killed {} while batch {in_flight} was in flight",
        victim.name()
    );

    client
        .wait_committed("exec", in_flight as i64, Duration::from_secs(30))
        .await;
    client
        .wait_state("exec", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(survivor.is_running(), "the other executor is still up");
    assert!(driver.is_running(), "the driver is still up");
    assert_exactly_once(&sink, TOTAL).await;
    assert_epochs_non_decreasing(&root, "exec");
}
