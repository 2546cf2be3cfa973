//! A state larger than the memory an executor may give it: 5 M keys with
//! `--state-memory-bytes` at 256 MiB, through an executor SIGKILL (the
//! state is rebuilt from the checkpoint into local files) and a driver
//! SIGKILL. The latest row of every key in the sink holds its exact count
//! and sum, and the executor's resident memory stays under 1 GiB.

use std::time::Duration;

use sluice_proto::QueryState;
use sluice_tests::scale::{PeakRss, latest_ints};
use sluice_tests::{Cluster, ExecutorOpts, Spec};

const KEYS: i64 = 5_000_000;
/// The fill, then a fifth of the keys again.
const TOTAL: i64 = 6_000_000;
const PER_BATCH: u64 = 500_000;
const GIB: u64 = 1 << 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_million_keys_in_256_mib_are_exact_through_kills() {
    let cluster = Cluster::new("state-scale");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor_with(
        &drivers,
        ExecutorOpts {
            extra_args: vec!["--state-memory-bytes".into(), (256u64 << 20).to_string()],
            ..ExecutorOpts::default()
        },
    );
    let rss = PeakRss::watch(executor.pid_source());
    let sink = cluster.sink_path("scale");
    let sql = format!(
        "SELECT value % {KEYS} AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % {KEYS}"
    );
    let spec = Spec::new("scale", &sink)
        .partitions(4)
        .rows_per_second(1_000_000_000)
        .total_rows(TOTAL as u64)
        .max_rows_per_batch(PER_BATCH)
        .interval_ms(0)
        .sql(&sql)
        .with("state_partitions: 4")
        .with("snapshot_interval: 4")
        .to_yaml();
    let mut client = cluster.client(&drivers);
    client.submit(&spec).await.expect("submitted");

    let long = Duration::from_secs(300);
    client.wait_committed("scale", 3, long).await;
    executor.kill();
    executor.restart();
    client.wait_committed("scale", 7, long).await;
    driver.kill();
    driver.restart_ready().await;
    let status = client.wait_state("scale", QueryState::Finished, long).await;
    assert!(status.error.is_empty(), "{status:?}");
    let peak = rss.peak();
    eprintln!("executor peak RSS {} MiB", peak >> 20);
    assert!(peak > 0, "the executor's memory was sampled");
    assert!(
        peak < GIB,
        "executor RSS peaked at {peak} bytes, above 1 GiB"
    );

    let latest = latest_ints(&sink, "k", &["n", "s"]).await;
    assert_eq!(latest.len() as i64, KEYS, "every key is in the sink");
    let mut wrong = 0;
    for (k, (_, got)) in &latest {
        let twice = *k < TOTAL - KEYS;
        let want = match twice {
            true => vec![2, 2 * k + KEYS],
            false => vec![1, *k],
        };
        if *got != want {
            wrong += 1;
            if wrong <= 5 {
                eprintln!("key {k}: {got:?}, want {want:?}");
            }
        }
    }
    assert_eq!(
        wrong, 0,
        "keys whose latest row is not their exact count and sum"
    );
    let log = std::fs::read_to_string(executor.log_path()).unwrap_or_default();
    assert!(
        log.contains("state reloaded from storage"),
        "the killed executor rebuilt its state from the checkpoint"
    );
}
