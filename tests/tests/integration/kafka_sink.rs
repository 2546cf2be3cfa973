//! Kafka → SQL → Kafka. With `exactly_once`, on a broker with transactions
//! (noida-db), while records are produced: the driver is SIGKILLed at a
//! random point and at both points of a batch's commit (after
//! `transactions/N`, before any commit; after the commits, before
//! `commits/N`), and an executor once, and a
//! `read_committed` reader of the output topic then sees every input record
//! exactly once, computed as the SQL says, keyed records on one partition
//! per key. With `at_least_once` on tansu, nothing is lost. Bad input is
//! refused at submit, named.

use sluice_common::checkpoint::{Log, QUERIES_DIR, Record};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::cluster::{Cluster, DriverOpts};
use sluice_tests::kafka::{self, Broker, SCHEMA, topic_records};
use sluice_tests::{Client, test_rng};

const TOTAL: u64 = 6000;
const CHUNK: u64 = 200;
/// The driver's failpoints of a batch's commit (debug builds): after
/// `transactions/N`, before any commit; after the commits, before
/// `commits/N`. A batch that reaches an armed one waits there.
const PREPARED: &str = "kafka-prepared";
const COMMITTED: &str = "kafka-committed";
/// How long a batch may take to reach an armed failpoint.
const HELD_WITHIN: Duration = Duration::from_secs(60);

/// Produces `0..TOTAL` to the 4 partitions of `topic`, a chunk every
/// 100 ms.
fn producer(broker: &Broker, topic: &'static str) -> tokio::task::JoinHandle<()> {
    kafka::produce_while(broker, topic, 4, TOTAL, CHUNK)
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

/// The output records: each input value once, with its double, keyed by
/// its city, every city on one partition.
fn assert_each_once(records: &[(i32, sluice_kafka::KafkaRecord)], total: u64) {
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
    let driver = cluster.start_ready_driver().await;
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

    // Kill point 0: anywhere, most likely while tasks produce.
    tokio::time::sleep(rng.millis(200, 600)).await;
    eprintln!("SIGKILL of the driver at a random point");
    driver.kill();
    driver.restart_ready().await;

    // Kill point 1: transactions/N written, none committed.
    tokio::time::sleep(rng.millis(100, 400)).await;
    driver.failpoint(PREPARED, true).await;
    let held = driver.wait_failpoint_hit(PREPARED, HELD_WITHIN).await;
    eprintln!("SIGKILL of the driver at {PREPARED}, batch {held}");
    driver.kill();
    driver.restart_ready().await;

    tokio::time::sleep(rng.millis(100, 400)).await;
    eprintln!("SIGKILL of executor-0");
    executors[0].kill();

    // Kill point 2: every transaction of batch M committed, commits/M not
    // written.
    driver.failpoint(COMMITTED, true).await;
    let held = driver.wait_failpoint_hit(COMMITTED, HELD_WITHIN).await;
    let visible = topic_records(&kafka, "output").await.len();
    eprintln!("SIGKILL of the driver at {COMMITTED}, batch {held}, {visible} records visible");
    driver.kill();
    driver.restart_ready().await;

    producing.await.expect("producer");
    executors[0].restart();
    read_all_and_stop(&mut client, "k2k").await;
    assert_eq!(driver.starts(), 4);
    let records = topic_records(&kafka, "output").await;
    assert_each_once(&records, TOTAL);
    let status = client.get("k2k").await.expect("status");
    let txns = status
        .latest_progress
        .and_then(|p| p.kafka_transactions)
        .expect("the progress counts the transactions");
    eprintln!("last batch's transactions: {txns:?}");
}

/// The transactions that batches' progress records (in the checkpoint)
/// say failed task attempts left, aborted by their retries.
fn aborted_in_progress(root: &Path, query: &str) -> u64 {
    let dir = root.join(QUERIES_DIR).join(query).join(Log::Progress.dir());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter_map(|v| v["kafka_transactions"]["aborted"].as_u64())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_executor_is_a_zombie_whose_records_never_show() {
    let cluster = Cluster::new("kafka-sink-zombie");
    let broker = Broker::start_transactional(&cluster).await;
    broker.create_topic("input", 4).await;
    broker.create_topic("output", 3).await;
    let kafka = broker.client().await;
    kafka::produce(&kafka, "input", 4, 0..TOTAL).await;
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executors = [
        cluster.start_executor(&drivers),
        cluster.start_executor(&drivers),
    ];
    let mut client = cluster.client(&drivers);
    let text = spec("zombie", &broker.servers(), "exactly_once").replace(
        "max_records_per_partition: 150",
        "max_records_per_partition: 500",
    );
    client.submit(&text).await.expect("submit");
    let root = cluster.checkpoint_root();
    // Paused longer than the driver's executor timeout (2 s): the tasks it
    // runs are given to the other executor, whose producers fence its
    // transactions; resumed, it goes on writing as a zombie.
    for round in 1..=3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        eprintln!("SIGSTOP of executor-0, round {round}");
        executors[0].process().pause();
        tokio::time::sleep(Duration::from_secs(3)).await;
        executors[0].process().resume();
        tokio::time::sleep(Duration::from_millis(500)).await;
        if aborted_in_progress(&root, "zombie") > 0 {
            break;
        }
    }
    read_all_and_stop(&mut client, "zombie").await;
    let aborted = aborted_in_progress(&root, "zombie");
    eprintln!("transactions of failed attempts, aborted: {aborted}");
    assert!(
        aborted > 0,
        "no task of the paused executor was retried: the test proved nothing"
    );
    assert_each_once(&topic_records(&kafka, "output").await, TOTAL);
    // The driver's metrics count the same.
    let series = |outcome: &str| {
        format!("sluice_kafka_transactions_total{{outcome=\"{outcome}\",query=\"zombie\"}}")
    };
    let metric = driver.metric(&series("aborted")).await;
    assert_eq!(metric, Some(aborted as f64), "{}", driver.metrics().await);
    let committed = driver.metric(&series("committed")).await.unwrap_or(0.0);
    assert!(committed >= 4.0, "{committed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_between_a_batchs_record_and_its_commits_keeps_the_batch_whole() {
    let cluster = Cluster::new("kafka-sink-stop");
    let broker = Broker::start_transactional(&cluster).await;
    broker.create_topic("input", 4).await;
    broker.create_topic("output", 3).await;
    let kafka = broker.client().await;
    kafka::produce(&kafka, "input", 4, 0..TOTAL).await;
    let driver = cluster.start_ready_driver().await;
    driver.failpoint(PREPARED, true).await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    let text = spec("stopped", &broker.servers(), "exactly_once");
    client.submit(&text).await.expect("submit");
    let held = driver.wait_failpoint_hit(PREPARED, HELD_WITHIN).await;
    assert!(
        topic_records(&kafka, "output").await.is_empty(),
        "nothing is visible before the commits"
    );
    client.stop("stopped").await.expect("stop");
    driver.failpoint(PREPARED, false).await;
    // The stopped query's recorded batch is committed whole.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let records = topic_records(&kafka, "output").await;
        if !records.is_empty() || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "stopped at {PREPARED}, batch {held}: {} records visible",
        first.len()
    );
    // Batch 0 read the first 150 records of each partition: values
    // 4 i + p for i < 150.
    let mut values: Vec<u64> = first
        .iter()
        .map(|(_, r)| {
            let row: serde_json::Value =
                serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON");
            row["value"].as_u64().expect("value")
        })
        .collect();
    values.sort_unstable();
    assert_eq!(
        values,
        (0..600).collect::<Vec<u64>>(),
        "batch 0, whole and once"
    );
    // Nothing more comes: the query stopped after the batch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(topic_records(&kafka, "output").await.len(), 600);
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
    let text = spec("internal", &servers, "at_least_once")
        .replace("topic: output", "topic: __consumer_offsets");
    let err = client.submit(&text).await.expect_err("an internal topic");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("sink.kafka.topic")
            && err.message().contains("Kafka's internal topics"),
        "{}",
        err.message()
    );
    // Nothing of the refused queries stays.
    let listed = client.list().await.expect("list");
    assert!(listed.is_empty(), "{listed:?}");
}

/// The source and the sink on a cluster with TLS (a terminator in front of
/// tansu, see `sluice_tests::kafka_tls`) and SCRAM-SHA-512: records read and
/// written through both, the password never in the stored spec; a wrong
/// password is refused at submit, naming the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_tls_and_scram_is_read_and_written() {
    use sluice_common::spec::SaslMechanism;
    use sluice_tests::cluster::ExecutorOpts;
    use sluice_tests::kafka::{KafkaPki, ScramUser, login, secrets_args, secrets_dir};

    const N: u64 = 2000;
    let cluster = Cluster::new("kafka-sink-secured");
    let pki = KafkaPki::new(secrets_dir(&cluster).join("pki"));
    let bob = ScramUser::new("bob", "bob-pw-512", SaslMechanism::ScramSha512);
    let broker = Broker::start_secured(&cluster, &[bob], Some(&pki), false).await;
    broker.create_topic("input", 4).await;
    broker.create_topic("output", 3).await;
    let kafka = broker.client().await;
    kafka::produce(&kafka, "input", 4, 0..N).await;
    let tls = sluice_common::spec::KafkaSecurity {
        protocol: sluice_common::spec::SecurityProtocol::Ssl,
        ssl_ca: broker.security().ssl_ca.clone(),
        ..Default::default()
    };
    let security = login(
        &cluster,
        &tls,
        "bob",
        "bob-pw-512",
        SaslMechanism::ScramSha512,
    );
    let flow = serde_json::to_string(&security).expect("JSON");
    let text = spec("secured", &broker.servers(), "at_least_once")
        .replace(
            "    max_records_per_partition: 150\n",
            &format!("    max_records_per_partition: 150\n    security: {flow}\n"),
        )
        .replace(
            "    delivery: at_least_once\n",
            &format!("    delivery: at_least_once\n    security: {flow}\n"),
        );
    assert_eq!(text.matches("security:").count(), 2, "{text}");

    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: secrets_args(&cluster),
        ..Default::default()
    });
    driver.wait_ready(sluice_tests::node::READY_TIMEOUT).await;
    let executor = ExecutorOpts {
        extra_args: secrets_args(&cluster),
        ..Default::default()
    };
    let _executor = cluster.start_executor_with(driver.addr(), executor);
    let mut client = cluster.client(driver.addr());
    let wrong = login(
        &cluster,
        &tls,
        "bob",
        "not-bobs",
        SaslMechanism::ScramSha512,
    );
    let bad = text.replace(&flow, &serde_json::to_string(&wrong).expect("JSON"));
    let err = client
        .submit(&bad.replace("name: secured", "name: refused"))
        .await
        .expect_err("a wrong password");
    assert!(
        err.message()
            .contains("SASL authentication failed for user \"bob\" (SCRAM-SHA-512)"),
        "{}",
        err.message()
    );
    assert!(!err.message().contains("not-bobs"), "{}", err.message());

    client.submit(&text).await.expect("submit");
    kafka::wait_ends(&mut client, "secured", N as i64).await;
    client.stop("secured").await.expect("stop");
    let records = topic_records(&kafka, "output").await;
    assert_each_once(&records, N);
    let stored = std::fs::read_to_string(
        cluster
            .checkpoint_root()
            .join(QUERIES_DIR)
            .join("secured")
            .join(Record::Spec.rel()),
    )
    .expect("the stored spec");
    assert!(stored.contains("sasl_password_file"), "{stored}");
    assert!(
        !stored.contains("bob-pw-512"),
        "the password is not stored: {stored}"
    );
}
