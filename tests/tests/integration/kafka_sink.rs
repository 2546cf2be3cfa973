//! Kafka → SQL → Kafka. With `exactly_once`, on a broker with transactions
//! (noida-db), while records are produced: the driver is SIGKILLed at both
//! points of a batch's commit (after `transactions/N`, before any commit;
//! after the commits, before `commits/N`) and an executor once, and a
//! `read_committed` reader of the output topic then sees every input record
//! exactly once, computed as the SQL says, keyed records on one partition
//! per key. With `at_least_once` on tansu, nothing is lost. Bad input is
//! refused at submit, named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::cluster::{Cluster, DriverOpts};
use sluice_tests::kafka::{self, Broker, SCHEMA, topic_records};
use sluice_tests::{Client, test_rng};

const TOTAL: u64 = 6000;
const CHUNK: u64 = 200;

/// Produces `0..TOTAL` to the 4 partitions of `topic`, a chunk every
/// 100 ms (about 3 s in all).
fn producer(broker: &Broker, topic: &'static str) -> tokio::task::JoinHandle<()> {
    let servers = broker.servers();
    tokio::spawn(async move {
        let k = sluice_common::kafka::Kafka::connect(&servers, Duration::from_secs(10))
            .await
            .expect("producer connects");
        for start in (0..TOTAL).step_by(CHUNK as usize) {
            kafka::produce(&k, topic, 4, start..start + CHUNK).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Reads topic `input` into topic `output` with `delivery`.
fn spec(name: &str, servers: &str, delivery: &str) -> String {
    format!(
        "name: {name}
source:
  kafka:
    bootstrap_servers: {servers}
    topic: input
    schema: {SCHEMA}
    max_records_per_partition: 150
trigger:
  interval_ms: 50
sql: SELECT value, city, value * 2 AS twice FROM input
sink:
  kafka:
    bootstrap_servers: {servers}
    topic: output
    key: city
    delivery: {delivery}
"
    )
}

/// Waits for a file whose name starts with `prefix` in `dir`.
async fn wait_file(dir: &Path, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir(dir)
            .expect("hold dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|n| n.starts_with(prefix));
        if let Some(name) = found {
            return name;
        }
        assert!(
            Instant::now() < deadline,
            "no {prefix}* in {}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The output records: each input value once, with its double, keyed by
/// its city, every city on one partition.
fn assert_each_once(records: &[(i32, sluice_common::kafka::KafkaRecord)], total: u64) {
    let mut values = Vec::new();
    let mut partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (p, r) in records {
        let row: serde_json::Value =
            serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON");
        let value = row["value"].as_u64().expect("value");
        assert_eq!(row["twice"].as_u64(), Some(value * 2), "{row}");
        let city = row["city"].as_str().expect("city").to_string();
        assert_eq!(
            r.key.as_deref(),
            Some(city.as_bytes()),
            "the key is the city"
        );
        partitions.entry(city).or_default().insert(*p);
        values.push(value);
    }
    values.sort_unstable();
    let dups: Vec<u64> = values
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(
        dups.is_empty(),
        "{} duplicates, e.g. {:?}",
        dups.len(),
        &dups[..dups.len().min(10)]
    );
    let expected: Vec<u64> = (0..total).collect();
    assert_eq!(values.len(), expected.len(), "records in the output topic");
    assert_eq!(values, expected);
    for (city, ps) in &partitions {
        assert_eq!(ps.len(), 1, "city {city} is on partitions {ps:?}");
    }
}

async fn read_all_and_stop(client: &mut Client, query: &str) {
    kafka::wait_ends(client, query, TOTAL as i64).await;
    let status = client.stop(query).await.expect("stop");
    eprintln!("stopped: {:?}", status.state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_kafka_is_exactly_once_through_kills_at_every_commit_point() {
    let mut rng = test_rng();
    let cluster = Cluster::new("kafka-sink-chaos");
    let broker = Broker::start_transactional(&cluster).await;
    broker.create_topic("input", 4).await;
    broker.create_topic("output", 3).await;
    let hold = cluster.root().join("hold");
    std::fs::create_dir_all(&hold).expect("hold dir");
    let driver = cluster.start_driver_with(DriverOpts {
        env: vec![("SLUICE_TEST_HOLD_DIR".into(), hold.display().to_string())],
        ..DriverOpts::default()
    });
    driver.wait_ready(Duration::from_secs(30)).await;
    let drivers = driver.addr().to_string();
    let executors = [
        cluster.start_executor(&drivers),
        cluster.start_executor(&drivers),
    ];
    let mut client = cluster.client(&drivers);
    client
        .submit(&spec("k2k", &broker.servers(), "exactly_once"))
        .await
        .expect("submit");
    let producing = producer(&broker, "input");
    let kafka = broker.client().await;

    // Kill point 1: transactions/N written, none committed.
    tokio::time::sleep(rng.millis(200, 600)).await;
    std::fs::write(hold.join("hold-prepared"), b"").expect("hold");
    let held = wait_file(&hold, "held-prepared-").await;
    eprintln!("SIGKILL of the driver at {held}");
    driver.kill();
    std::fs::remove_file(hold.join("hold-prepared")).expect("release");
    driver.restart_ready().await;

    tokio::time::sleep(rng.millis(100, 400)).await;
    eprintln!("SIGKILL of executor-0");
    executors[0].kill();

    // Kill point 2: every transaction of batch M committed, commits/M not
    // written.
    std::fs::write(hold.join("hold-committed"), b"").expect("hold");
    let held = wait_file(&hold, "held-committed-").await;
    let visible = topic_records(&kafka, "output").await.len();
    eprintln!("SIGKILL of the driver at {held}, {visible} records visible");
    driver.kill();
    std::fs::remove_file(hold.join("hold-committed")).expect("release");
    driver.restart_ready().await;

    producing.await.expect("producer");
    executors[0].restart();
    read_all_and_stop(&mut client, "k2k").await;
    assert_eq!(driver.starts(), 3);
    let records = topic_records(&kafka, "output").await;
    assert_each_once(&records, TOTAL);
    let status = client.get("k2k").await.expect("status");
    let txns = status
        .latest_progress
        .and_then(|p| p.kafka_transactions)
        .expect("the progress counts the transactions");
    eprintln!("last batch's transactions: {txns:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_on_tansu_loses_nothing() {
    let cluster = Cluster::new("kafka-sink-tansu");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("input", 4).await;
    broker.create_topic("output", 3).await;
    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    client
        .submit(&spec("alo", &broker.servers(), "at_least_once"))
        .await
        .expect("submit");
    let producing = producer(&broker, "input");
    producing.await.expect("producer");
    read_all_and_stop(&mut client, "alo").await;
    let kafka = broker.client().await;
    let records = topic_records(&kafka, "output").await;
    // Without a failure, at-least-once writes each record once too.
    assert_each_once(&records, TOTAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_or_an_unreachable_broker_is_refused_by_name() {
    let cluster = Cluster::new("kafka-sink-bad");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("input", 1).await;
    broker.create_topic("output", 1).await;
    let driver = cluster.start_ready_driver().await;
    let mut client = cluster.client(driver.addr());
    let servers = broker.servers();

    let text = spec("missing", &servers, "at_least_once").replace("topic: output", "topic: nope");
    let err = client.submit(&text).await.expect_err("no such topic");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("sink.kafka") && err.message().contains("nope"),
        "{}",
        err.message()
    );

    let port = sluice_tests::ports::free_port();
    let dead = format!("127.0.0.1:{port}");
    let text = spec("dead", &servers, "at_least_once").replace(
        &format!("bootstrap_servers: {servers}\n    topic: output"),
        &format!("bootstrap_servers: {dead}\n    topic: output"),
    );
    assert!(text.contains(&dead), "{text}");
    let err = client
        .submit(&text)
        .await
        .expect_err("nothing listens there");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains(&dead), "{}", err.message());

    let text = spec("nokey", &servers, "at_least_once").replace("key: city", "key: town");
    let err = client.submit(&text).await.expect_err("no such column");
    assert!(
        err.message().contains("sink.kafka.key"),
        "{}",
        err.message()
    );
    // Nothing of the refused queries stays.
    let listed = client.list().await.expect("list");
    assert!(listed.is_empty(), "{listed:?}");
}
