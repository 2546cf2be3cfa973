//! The Kafka source on a broker with transactions (noida-db), written to by
//! an independent transactional producer (confluent-kafka): the source
//! reads `read_committed`, so the records of an aborted transaction are
//! never read, and a batch plans no further than the oldest transaction
//! still open (the last stable offset). The records behind it, committed
//! ones included, are read once it commits, each once.

use std::time::Duration;

use sluice_tests::cluster::Cluster;
use sluice_tests::kafka::{self, Broker, Transaction, sink_values, spec, wait_read};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_committed_records_are_read_each_once() {
    let cluster = Cluster::new("kafka-transactions");
    let broker = Broker::start_transactional(&cluster).await;
    broker.create_topic("tx", 1).await;
    let servers = broker.servers();
    let kafka = broker.client().await;
    let partition = kafka.partition("tx", 0, true).await.expect("partition");

    Transaction::open(&servers, "tx", 0, "first", 0..10)
        .await
        .end(true)
        .await;
    Transaction::open(&servers, "tx", 0, "aborted", 100..110)
        .await
        .end(false)
        .await;
    Transaction::open(&servers, "tx", 0, "second", 10..20)
        .await
        .end(true)
        .await;
    // A transaction left open, then records written after it without one.
    let open = Transaction::open(&servers, "tx", 0, "open", 20..30).await;
    kafka::produce(&kafka, "tx", 1, 30..40).await;
    let stable = partition.latest().await.expect("last stable offset");

    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    let sink = cluster.sink_path("tx");
    client
        .submit(&spec("tx", &servers, "tx", &sink, ""))
        .await
        .expect("submit");

    let what = format!("read up to the open transaction at offset {stable}");
    wait_read(&mut client, "tx", &what, |p| {
        p.iter().any(|p| p.end_offset == stable)
    })
    .await;
    // Several triggers later, nothing past the open transaction was read.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = client.get("tx").await.expect("status");
    let progress = status.latest_progress.expect("progress");
    assert_eq!(progress.partitions[0].end_offset, stable, "{progress:#?}");
    assert_eq!(sink_values(&sink), (0..20).collect::<Vec<u64>>());

    open.end(true).await;
    let end = partition.latest().await.expect("latest offset");
    assert!(end > stable, "the commit moved the last stable offset");
    wait_read(
        &mut client,
        "tx",
        "read past the committed transaction",
        |p| p.iter().any(|p| p.end_offset == end),
    )
    .await;
    client.stop("tx").await.expect("stop");
    assert_eq!(sink_values(&sink), (0..40).collect::<Vec<u64>>());
}
