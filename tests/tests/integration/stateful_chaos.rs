//! The stateful oracle through chaos. Two stateful queries run over the
//! rate source, a running aggregate in update mode and windows in append
//! mode, while the driver is SIGKILLed mid-batch, an executor is SIGKILLed
//! while a batch's reduce tasks run (the state it held is lost), and both
//! are SIGKILLed at once; each is restarted in place. The seeded rng
//! picks the order and the timing (replay with `SLUICE_TEST_SEED=N`).
//!
//! Afterwards, against DataFusion over all of the input in one piece:
//! - update mode: the latest row of each group is the group's final
//!   value, so no batch was counted twice or lost from the state;
//! - append mode: each window was emitted exactly once, with its final
//!   value, in a batch whose watermark had passed its end;
//! - a state was rebuilt from storage (snapshot and deltas) after a kill;
//! - commit epochs never decrease.

use sluice_common::checkpoint::{Log, STATE_DIR};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::ha::wait_batch_in_flight;
use sluice_tests::stateful::{assert_pair, submit_pair};
use sluice_tests::{Cluster, DriverOpts, READY_TIMEOUT, latest_entry, query_dir, test_rng};

const RPS: u64 = 10_000;
const TOTAL: u64 = 80_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kill {
    Driver,
    Executor,
    Both,
}

/// Waits until the latest planned batch of `query` has begun its reduce
/// stage: a state delta of it exists, and it has not committed.
async fn wait_reduce_in_flight(root: &Path, query: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let state = query_dir(root, query).join(STATE_DIR).join("aggregate");
    while Instant::now() < deadline {
        let planned = latest_entry(root, query, Log::Offsets).map(|e| e.0);
        let committed = latest_entry(root, query, Log::Commits).map(|e| e.0);
        if let Some(n) = planned.filter(|&n| Some(n) != committed) {
            let delta = format!("{}.delta", sluice_common::checkpoint::padded(n));
            let started = sluice_tests::files_under(&state)
                .iter()
                .any(|f| f.ends_with(&delta));
            if started {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_queries_are_exact_through_driver_and_executor_kills() {
    let mut rng = test_rng();
    let cluster = Cluster::new("stateful-chaos");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--max-rows-per-task".into(), "1000".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let victim = cluster.start_executor(&drivers);
    let survivor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    submit_pair(&mut client, &cluster, (RPS, TOTAL), 3).await;
    let root = cluster.checkpoint_root();

    let mut kills = [Kill::Driver, Kill::Executor, Kill::Both];
    let i = rng.between(0, 2) as usize;
    kills.swap(0, i);
    for (k, kill) in kills.iter().enumerate() {
        client
            .wait_committed("counts", 3 * k as i64 + 2, Duration::from_secs(30))
            .await;
        let hit = match kill {
            Kill::Executor => wait_reduce_in_flight(&root, "counts", Duration::from_secs(20)).await,
            _ => wait_batch_in_flight(&root, "counts", Duration::from_secs(20)).await,
        };
        assert!(hit, "kill {k}: no batch in flight");
        tokio::time::sleep(rng.millis(0, 20)).await;
        if matches!(kill, Kill::Driver | Kill::Both) {
            driver.kill();
        }
        if matches!(kill, Kill::Executor | Kill::Both) {
            victim.kill();
        }
        let planned = latest_entry(&root, "counts", Log::Offsets).map(|e| e.0);
        eprintln!("kill {k}: {kill:?} with batch {planned:?} planned");
        tokio::time::sleep(rng.millis(0, 300)).await;
        if matches!(kill, Kill::Executor | Kill::Both) {
            victim.restart();
        }
        if matches!(kill, Kill::Driver | Kill::Both) {
            driver.restart_ready().await;
        }
    }
    assert_pair(&mut client, &cluster, (RPS, TOTAL)).await;
    assert_eq!(driver.starts(), 3, "the driver ran three times");
    assert!(survivor.is_running(), "the other executor stayed up");

    // A lost executor cost a reload from storage.
    let reloads: usize = [victim.log_path(), survivor.log_path()]
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("state reloaded from storage"))
                .count()
        })
        .sum();
    eprintln!("state reloads: {reloads}");
    assert!(reloads > 0, "a state was rebuilt from storage after a kill");
    let snapshots = sluice_tests::files_under(&query_dir(&root, "counts").join(STATE_DIR))
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".snapshot"))
        .count();
    assert!(snapshots > 0, "snapshots were written");
}
