//! A driver that cannot reach etcd when it starts keeps retrying with
//! backoff and logs why: it does not crash-loop, it stays alive (`/healthz`)
//! but not ready (`/readyz`), and it leads as soon as etcd is up.

use std::time::Duration;

use sluice_tests::etcd::EtcdCluster;
use sluice_tests::ha::start_ha_driver;
use sluice_tests::http;
use sluice_tests::{Cluster, QueryState, Spec, assert_exactly_once};

const TOTAL: u64 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_waits_for_etcd_without_crashing() {
    let cluster = Cluster::new("ha-etcd-unreachable");
    let etcd = EtcdCluster::start(&cluster, 1);
    let member = etcd.member(0);
    member.process().kill();

    let driver = start_ha_driver(&cluster, &etcd);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        driver.process().is_running(),
        "the driver exited without etcd:\n{}",
        driver.process().log_tail(30)
    );
    assert_eq!(http::status(driver.http_addr(), "/healthz").await, Ok(200));
    assert_eq!(http::status(driver.http_addr(), "/readyz").await, Ok(503));
    let log = std::fs::read_to_string(driver.process().log_path()).expect("driver log");
    let retries = log.matches("etcd session ended; retrying").count();
    assert!(retries >= 2, "the driver retries and says why:\n{log}");
    assert!(
        log.contains("connect"),
        "the reason names the connection failure:\n{log}"
    );

    member.process().restart();
    member.wait_healthy(Duration::from_secs(30)).await;
    driver.wait_ready(Duration::from_secs(30)).await;

    let _executor = cluster.start_executor(driver.addr());
    let sink = cluster.sink_path("late-etcd");
    let spec = Spec::new("late-etcd", &sink)
        .partitions(2)
        .rows_per_second(2000)
        .total_rows(TOTAL)
        .interval_ms(100);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_state("late-etcd", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert_exactly_once(&sink, TOTAL).await;
}
