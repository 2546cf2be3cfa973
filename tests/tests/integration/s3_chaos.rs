//! The exactly-once tests again, with the checkpoint root, the sinks and the
//! file source on a real S3-compatible server (moto, on loopback):
//! - a standalone driver SIGKILLed and restarted, twice;
//! - an executor SIGKILLed mid-query, with another one left;
//! - the etcd leader driver SIGKILLed: the standby takes over from the
//!   checkpoint on S3;
//! - a file source and a static table read from S3, through SQL, committing
//!   exactly what DataFusion computes over the same files.
//!
//! Each run is proven by the checker reading the sink on S3.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use sluice_common::storage::Path as Key;
use sluice_tests::ha::{TTL_MS, driver_list, wait_leader, wait_leader_except};
use sluice_tests::inputs::{self, rows};
use sluice_tests::oracle::{committed_at, expected_with};
use sluice_tests::{
    Client, Cluster, DriverOpts, EtcdCluster, Executor, ExecutorOpts, QueryState, READY_TIMEOUT,
    S3, Spec, assert_exactly_once_at, test_rng,
};

const BUCKET: &str = "sluice";

async fn moto(cluster: &Cluster) -> S3 {
    let s3 = S3::start(cluster, "moto", false).await;
    s3.create_bucket(BUCKET).await;
    s3
}

fn root() -> String {
    format!("s3://{BUCKET}/checkpoint")
}

fn executor(cluster: &Cluster, s3: &S3, drivers: &str) -> Executor {
    cluster.start_executor_with(
        drivers,
        ExecutorOpts {
            env: s3.env(),
            ..ExecutorOpts::default()
        },
    )
}

/// Waits for `query` to finish, then runs the checker on its sink on S3.
async fn finish_and_check(client: &mut Client, s3: &S3, query: &str, sink: &str, total: u64) {
    client
        .wait_state(query, QueryState::Finished, Duration::from_secs(120))
        .await;
    assert_exactly_once_at(&s3.stores(), sink, total).await;
}

/// A standalone driver whose checkpoint root is on `s3`, ready.
async fn s3_driver(cluster: &Cluster, s3: &S3) -> sluice_tests::Driver {
    let driver = cluster.start_driver_with(DriverOpts {
        checkpoint_root: Some(root()),
        env: s3.env(),
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    driver
}

fn rate_spec(query: &str, sink: &str, total: u64) -> String {
    Spec::new(query, Path::new(sink))
        .partitions(4)
        .rows_per_second(1500)
        .total_rows(total)
        .interval_ms(50)
        .max_rows_per_batch(300)
        .to_yaml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_driver_killed_and_restarted_keeps_exactly_once() {
    const TOTAL: u64 = 6000;
    let mut rng = test_rng();
    let cluster = Cluster::new("s3-driver-crash");
    let s3 = moto(&cluster).await;
    let driver = s3_driver(&cluster, &s3).await;
    let drivers = driver.addr().to_string();
    let _executors = [
        executor(&cluster, &s3, &drivers),
        executor(&cluster, &s3, &drivers),
    ];
    let sink = format!("s3://{BUCKET}/out");
    let mut client = cluster.client(&drivers);
    let id = client
        .submit(&rate_spec("crash", &sink, TOTAL))
        .await
        .expect("submit")
        .id;
    for k in 1..=2 {
        let delay = rng.millis(200, 1500);
        tokio::time::sleep(delay).await;
        eprintln!("kill {k}/2 after {delay:?}");
        driver.kill();
        driver.restart_ready().await;
        let status = client
            .wait_for("crash", "reloaded", Duration::from_secs(30), |_| true)
            .await;
        assert_eq!(status.id, id, "the restarted driver resumed the same query");
    }
    finish_and_check(&mut client, &s3, "crash", &sink, TOTAL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_executor_killed_keeps_exactly_once() {
    const TOTAL: u64 = 6000;
    let cluster = Cluster::new("s3-executor-crash");
    let s3 = moto(&cluster).await;
    let driver = s3_driver(&cluster, &s3).await;
    let drivers = driver.addr().to_string();
    let doomed = executor(&cluster, &s3, &drivers);
    let _survivor = executor(&cluster, &s3, &drivers);
    let sink = format!("s3://{BUCKET}/out");
    let mut client = cluster.client(&drivers);
    client
        .submit(&rate_spec("exec", &sink, TOTAL))
        .await
        .expect("submit");
    client
        .wait_committed("exec", 3, Duration::from_secs(30))
        .await;
    doomed.kill();
    finish_and_check(&mut client, &s3, "exec", &sink, TOTAL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_leader_failover_keeps_exactly_once() {
    const TOTAL: u64 = 6000;
    let cluster = Cluster::new("s3-failover");
    let s3 = moto(&cluster).await;
    let etcd = EtcdCluster::start_healthy(&cluster, 1).await;
    let drivers: Vec<_> = (0..2)
        .map(|_| {
            cluster.start_driver_with(DriverOpts {
                etcd: etcd.endpoints(),
                lease_ttl_ms: Some(TTL_MS),
                checkpoint_root: Some(root()),
                env: s3.env(),
                ..DriverOpts::default()
            })
        })
        .collect();
    let leader = wait_leader(&drivers, READY_TIMEOUT).await;
    let list = driver_list(&drivers);
    let _executors = [
        executor(&cluster, &s3, &list),
        executor(&cluster, &s3, &list),
    ];
    let sink = format!("s3://{BUCKET}/out");
    let mut client = cluster.client(&list);
    client
        .submit(&rate_spec("ha", &sink, TOTAL))
        .await
        .expect("submit");
    client
        .wait_committed("ha", 3, Duration::from_secs(30))
        .await;
    drivers[leader].kill();
    let next = wait_leader_except(&drivers, Some(leader), Duration::from_secs(30)).await;
    assert_ne!(next, leader);
    let done = client
        .wait_state("ha", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(done.epoch > 1, "the standby finished the query: {done:?}");
    assert_exactly_once_at(&s3.stores(), &sink, TOTAL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_file_source_and_table_are_exact() {
    const FILES: u64 = 6;
    const ROWS: u64 = 150;
    let cluster = Cluster::new("s3-files");
    let s3 = moto(&cluster).await;
    let stores = s3.stores();
    let input = stores.open(&format!("s3://{BUCKET}/in")).unwrap();
    let mut batches = Vec::new();
    for n in 0..FILES {
        let batch = rows(n, ROWS);
        let bytes = Bytes::from(inputs::encode("jsonl", &batch));
        let key = Key::from(format!("f{n:03}.jsonl").as_str());
        input.create(&key, bytes).await.unwrap();
        batches.push(batch);
    }
    let tables = stores.open(&format!("s3://{BUCKET}/tables")).unwrap();
    let cities = Bytes::from(inputs::encode("csv", &inputs::cities()));
    tables
        .create(&Key::from("cities.csv"), cities)
        .await
        .unwrap();

    let driver = s3_driver(&cluster, &s3).await;
    let _executor = executor(&cluster, &s3, driver.addr());
    let sql = "SELECT i.id, i.city, c.country FROM input i JOIN cities c ON i.city = c.name";
    let sink = format!("s3://{BUCKET}/out");
    let mut spec = inputs::spec(
        "files",
        Path::new(&format!("s3://{BUCKET}/in")),
        "jsonl",
        Path::new(&sink),
        sql,
        FILES,
    );
    let table = inputs::cities_table_yaml(
        Path::new(&format!("s3://{BUCKET}/tables/cities.csv")),
        "csv",
    );
    spec.push_str(&table);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec).await.expect("submit");
    client
        .wait_state("files", QueryState::Finished, Duration::from_secs(90))
        .await;
    let want = expected_with(sql, batches, &[("cities", inputs::cities())]).await;
    let got = committed_at(&stores, &sink).await;
    assert!(!want.is_empty());
    assert_eq!(got, want, "the sink on S3 holds what DataFusion computes");
}
