//! Two executor processes with one `--id` (a pod restarted under the same
//! name while its old connection lingers, or two pods named alike): the
//! newer replaces the older exactly once, the older exits with a clear
//! message instead of fighting back, `sluice cluster` shows the conflict,
//! and the query finishes exactly-once.

use std::time::Duration;

use sluice_tests::{Cluster, ExecutorOpts, QueryState, Spec, assert_exactly_once};

const TOTAL: u64 = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newer_of_two_executors_with_one_id_wins_once() {
    let cluster = Cluster::new("twins");
    let driver = cluster.start_ready_driver().await;
    let twin = || ExecutorOpts {
        id: Some("twin".into()),
        ..ExecutorOpts::default()
    };
    let older = cluster.start_executor_with(driver.addr(), twin());
    let sink = cluster.sink_path("q");
    let spec = Spec::new("q", &sink)
        .rows_per_second(2000)
        .total_rows(TOTAL)
        .interval_ms(100);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    client.wait_committed("q", 1, Duration::from_secs(30)).await;

    let newer = cluster.start_executor_with(driver.addr(), twin());
    let status = older
        .process()
        .wait_exit(Duration::from_secs(20))
        .await
        .expect("the older executor is still up");
    assert!(!status.success(), "{status}");
    let log = std::fs::read_to_string(older.process().log_path()).unwrap();
    assert!(
        log.contains("another process uses this executor id") && log.contains("twin"),
        "the older executor says why it stopped:\n{}",
        older.process().log_tail(20)
    );

    let out = cluster.cli(driver.addr(), &["cluster"]).await;
    out.assert_success();
    assert!(
        out.stdout.contains("twin") && out.stdout.contains("two processes"),
        "sluice cluster shows the conflict: {out}"
    );

    client
        .wait_state("q", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(newer.process().is_running(), "the newer executor stays");
    assert_exactly_once(&sink, TOTAL).await;
    let driver_log = std::fs::read_to_string(driver.process().log_path()).unwrap();
    // Evictions only: a task that the older executor was running when it
    // was replaced is logged as lost too ("executor lost while running a
    // task"), once per task.
    let replaced = driver_log
        .lines()
        .filter(|l| {
            l.contains("executor lost") && !l.contains("while running") && l.contains("replaced")
        })
        .count();
    assert_eq!(replaced, 1, "one replacement, no eviction loop");
}
