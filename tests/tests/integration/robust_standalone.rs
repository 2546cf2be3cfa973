//! Standalone drivers that lose their epoch, or cannot claim one:
//! - a second standalone driver on the same root deposes the first, which
//!   answers with the new leader's address in `sluice-leader`, logs who
//!   replaced it, and exits non-zero; its executor follows the hint and the
//!   query ends exactly-once under the new driver;
//! - an epoch counter at `u64::MAX` is a clear error naming the file, at
//!   once, not a wrap to epoch 0 and a spin that ignores SIGTERM.

use sluice_common::checkpoint::EPOCHS_DIR;
use std::time::{Duration, Instant};

use sluice_proto::LEADER_METADATA_KEY;
use sluice_tests::{Cluster, DriverOpts, QueryState, READY_TIMEOUT, Spec, assert_exactly_once};
use tonic::Code;

const TOTAL: u64 = 4000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_standalone_driver_points_at_its_successor_and_exits() {
    let cluster = Cluster::new("deposed");
    let first = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(first.addr());
    let sink = cluster.sink_path("q");
    let spec = Spec::new("q", &sink)
        .rows_per_second(1000)
        .total_rows(TOTAL)
        .interval_ms(100);
    let mut client = cluster.client(first.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    client.wait_committed("q", 2, Duration::from_secs(30)).await;

    let second = cluster.start_driver_with(DriverOpts {
        id: Some("successor".into()),
        ..DriverOpts::default()
    });
    second.wait_ready(READY_TIMEOUT).await;

    // The first driver answers with a hint to the second until it exits.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut hinted = false;
    while first.process().is_running() {
        assert!(Instant::now() < deadline, "the deposed driver is still up");
        match cluster.client(first.addr()).list().await {
            Err(e) if e.code() == Code::Unavailable => {
                let hint = e.metadata().get(LEADER_METADATA_KEY);
                if hint.and_then(|h| h.to_str().ok()) == Some(second.addr()) {
                    hinted = true;
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = first.process().exit_status().expect("exited");
    assert!(
        !status.success(),
        "a deposed driver exits non-zero: {status}"
    );
    assert!(hinted, "the deposed driver never answered with the hint");
    let log = std::fs::read_to_string(first.process().log_path()).unwrap();
    assert!(
        log.contains("successor") && log.contains(second.addr()),
        "the deposed driver's log must name its successor:\n{}",
        first.process().log_tail(30)
    );

    // The executor followed the hint: the query finishes under the second.
    let mut client = cluster.client(second.addr());
    let done = client
        .wait_state("q", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(done.epoch > 1, "{done:?}");
    assert_exactly_once(&sink, TOTAL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_counter_at_its_maximum_is_an_error_naming_the_file() {
    let cluster = Cluster::new("epoch-max");
    let epochs = cluster.checkpoint_root().join(EPOCHS_DIR);
    std::fs::create_dir_all(&epochs).unwrap();
    let last = epochs.join(u64::MAX.to_string());
    std::fs::write(&last, br#"{"version":1,"driver":"old"}"#).unwrap();

    let driver = cluster.start_driver();
    let status = driver
        .process()
        .wait_exit(Duration::from_secs(15))
        .await
        .unwrap_or_else(|| {
            panic!(
                "the driver neither failed nor stopped:\n{}",
                driver.process().log_tail(20)
            )
        });
    assert!(!status.success(), "{status}");
    let log = std::fs::read_to_string(driver.process().log_path()).unwrap();
    assert!(
        log.contains(&u64::MAX.to_string()) && log.contains("epoch"),
        "the error must name the epoch file:\n{log}"
    );
    // Nothing was claimed past it: no wrap to epoch 0.
    let claimed: Vec<String> = std::fs::read_dir(&epochs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(claimed, [u64::MAX.to_string()]);
}
