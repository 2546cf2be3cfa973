//! The driver is SIGKILLed 3 or 4 times at random (seeded) points of one
//! query and restarted each time on the same ports and checkpoint root,
//! without resubmission. The query still ends FINISHED, exactly-once, with
//! commit epochs that never decrease. Replay with `SLUICE_TEST_SEED=N`.

use sluice_common::checkpoint::Log;
use std::time::Duration;

use sluice_tests::{
    Cluster, QueryState, Spec, assert_epochs_non_decreasing, assert_exactly_once, log_entries,
    test_rng,
};

const TOTAL: u64 = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_killed_and_restarted_keeps_exactly_once() {
    let mut rng = test_rng();
    let cluster = Cluster::new("driver-crash");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executors = [
        cluster.start_executor(&drivers),
        cluster.start_executor(&drivers),
    ];

    let sink = cluster.sink_path("crash");
    let spec = Spec::new("crash", &sink)
        .partitions(4)
        .rows_per_second(1500)
        .total_rows(TOTAL)
        .interval_ms(50)
        .max_rows_per_batch(300);
    let mut client = cluster.client(&drivers);
    let id = client.submit(&spec.to_yaml()).await.expect("submit").id;

    let kills = rng.between(3, 4);
    let root = cluster.checkpoint_root();
    for k in 1..=kills {
        // A random point: anywhere from before the first plan to well into
        // the run (6000 rows at 1500 rows/s take about 4 s).
        let delay = rng.millis(50, 1200);
        tokio::time::sleep(delay).await;
        let offsets = log_entries(&root, "crash", Log::Offsets).len();
        let commits = log_entries(&root, "crash", Log::Commits).len();
        eprintln!("kill {k}/{kills} after {delay:?}: {offsets} offsets, {commits} commits on disk");
        driver.kill();
        // Sometimes restart at once, sometimes after a pause.
        if rng.chance(0.5) {
            tokio::time::sleep(rng.millis(0, 500)).await;
        }
        driver.restart_ready().await;
        let status = client
            .wait_for("crash", "reloaded", Duration::from_secs(30), |_| true)
            .await;
        assert_eq!(status.id, id, "the restarted driver resumed the same query");
    }

    let status = client
        .wait_state("crash", QueryState::Finished, Duration::from_secs(90))
        .await;
    assert_eq!(status.id, id);
    assert_eq!(driver.starts() as u64, kills + 1);
    assert_exactly_once(&sink, TOTAL).await;
    let epochs = assert_epochs_non_decreasing(&root, "crash");
    eprintln!("commit epochs (batch, epoch): {epochs:?}");
}

/// A STOPPED query has no runner after a restart: what its status says
/// of its commits comes from the checkpoint, `commits/` and the rows each
/// commit record counts, in `status` and in `list` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_query_shows_its_commits_after_the_driver_restarts() {
    let cluster = Cluster::new("driver-crash-stopped");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let sink = cluster.sink_path("paused");
    let spec = Spec::new("paused", &sink)
        .partitions(2)
        .rows_per_second(2000)
        .interval_ms(50)
        .max_rows_per_batch(100);
    let mut client = cluster.client(&drivers);
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_committed("paused", 5, Duration::from_secs(60))
        .await;
    client.stop("paused").await.expect("stop");
    let stopped = client
        .wait_state("paused", QueryState::Stopped, Duration::from_secs(30))
        .await;
    eprintln!(
        "stopped: last_committed_batch {}, committed_rows {}",
        stopped.last_committed_batch, stopped.committed_rows
    );

    // Nothing writes to the checkpoint once the driver is killed: what it
    // holds then is what the status must show.
    driver.kill();
    let root = cluster.checkpoint_root();
    let (last, path) = sluice_tests::latest_entry(&root, "paused", Log::Commits).expect("commits");
    let commit: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let want = (Some(last as i64), commit["input_rows_total"].as_u64());
    assert!(want.1.is_some_and(|r| r > 0), "{commit}");
    driver.restart_ready().await;
    client
        .wait_for("paused", "reloaded", Duration::from_secs(30), |_| true)
        .await;
    let cli = |args: &'static [&'static str]| {
        let (cluster, drivers) = (&cluster, drivers.clone());
        async move {
            let out = cluster.cli(&drivers, args).await;
            out.assert_success();
            out.json()
        }
    };
    let status = cli(&["status", "paused", "--json"]).await;
    eprintln!("after the restart: {status}");
    assert_eq!(status["state"], "STOPPED", "{status}");
    let shown = |v: &serde_json::Value| {
        (
            v["last_committed_batch"].as_i64(),
            v["committed_rows"].as_u64(),
        )
    };
    assert_eq!(shown(&status), want, "status: {status}");
    let list = cli(&["list", "--json"]).await;
    let listed = list
        .as_array()
        .and_then(|l| l.iter().find(|q| q["name"] == "paused"))
        .unwrap_or_else(|| panic!("paused is listed: {list}"));
    assert_eq!(shown(listed), want, "list: {list}");
}
