//! Records a Kafka query has not read yet disappear: retention deletes
//! them, or the topic is deleted and recreated. With `fail_on_data_loss:
//! true` the query fails naming the topic, partition and offsets; with
//! `false` it skips them, counts them in its progress, and reads on.

use std::time::Duration;

use sluice_tests::kafka::{self, Broker};
use sluice_tests::{Client, Cluster, QueryState};

const WAIT: Duration = Duration::from_secs(60);

/// Waits until `query` has read partition 0 of its topic up to `end`.
async fn wait_end(client: &mut Client, query: &str, end: i64) {
    client
        .wait_for(query, &format!("read to offset {end}"), WAIT, |s| {
            assert_eq!(s.state, QueryState::Running as i32, "{s:#?}");
            s.latest_progress
                .as_ref()
                .is_some_and(|p| p.partitions.iter().any(|p| p.end_offset >= end))
        })
        .await;
}

/// Every `value` in a jsonl sink, sorted.
fn sink_values(sink: &std::path::Path) -> Vec<u64> {
    let mut values: Vec<u64> = sluice_tests::files_under(sink)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
        .flat_map(|f| {
            std::fs::read_to_string(&f)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]
                        .as_u64()
                        .unwrap()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    values.sort_unstable();
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_fail_the_query_or_are_skipped_and_counted() {
    let cluster = Cluster::new("kafka-retention");
    let broker = Broker::start(&cluster).await;
    let k = broker.client().await;
    for topic in ["kept", "lossy"] {
        broker.create_topic(topic, 1).await;
        kafka::produce(&k, topic, 1, 0..100).await;
    }
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let strict = cluster.sink_path("kept");
    let lenient = cluster.sink_path("lossy");
    // Ten records a batch, a batch every 300 ms: the query is far behind.
    let slow = "max_records_per_partition: 10";
    let spec = kafka::spec("kept", &broker.servers(), "kept", &strict, slow)
        .replace("interval_ms: 100", "interval_ms: 300");
    client.submit(&spec).await.expect("submit");
    let spec = kafka::spec(
        "lossy",
        &broker.servers(),
        "lossy",
        &lenient,
        &format!("{slow}\nfail_on_data_loss: false"),
    )
    .replace("interval_ms: 100", "interval_ms: 300");
    client.submit(&spec).await.expect("submit");
    wait_end(&mut client, "kept", 20).await;
    wait_end(&mut client, "lossy", 20).await;

    // While the driver is down, retention deletes offsets 0..60 of both.
    driver.kill();
    broker.delete_records_below(&cluster, "kept", 0, 60);
    broker.delete_records_below(&cluster, "lossy", 0, 60);
    driver.restart_ready().await;

    let status = client.wait_state("kept", QueryState::Failed, WAIT).await;
    let error = &status.error;
    assert!(
        error.contains("data loss")
            && error.contains("\"kept\" partition 0")
            && error.contains("are gone")
            && error.contains("60"),
        "{error}"
    );

    wait_end(&mut client, "lossy", 100).await;
    let progress = client.progress("lossy").await.expect("progress");
    let lost: u64 = progress.iter().map(|p| p.records_lost).sum();
    client.stop("lossy").await.expect("stop");
    // What it read before the deletion, then 60..100, each once; the
    // records between are counted as lost.
    let values = sink_values(&lenient);
    let before = values.iter().filter(|&&v| v < 60).count() as u64;
    assert!(before >= 20, "{values:?}");
    let expected: Vec<u64> = (0..before).chain(60..100).collect();
    assert_eq!(values, expected);
    assert_eq!(lost, 60 - before, "{progress:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_fails_the_query_or_is_read_again_from_its_start() {
    let cluster = Cluster::new("kafka-recreated");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("again", 1).await;
    let k = broker.client().await;
    kafka::produce(&k, "again", 1, 0..50).await;
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let strict = cluster.sink_path("strict");
    let lenient = cluster.sink_path("lenient");
    let spec = kafka::spec("strict", &broker.servers(), "again", &strict, "");
    client.submit(&spec).await.expect("submit");
    let spec = kafka::spec(
        "lenient",
        &broker.servers(),
        "again",
        &lenient,
        "fail_on_data_loss: false",
    );
    client.submit(&spec).await.expect("submit");
    wait_end(&mut client, "strict", 50).await;
    wait_end(&mut client, "lenient", 50).await;

    // The topic is deleted and created again, with fewer records than the
    // queries had read: its offsets start again at 0.
    broker.drop_topic(&cluster, "again");
    broker.create_topic("again", 1).await;
    kafka::produce(&k, "again", 1, 100..120).await;

    let status = client.wait_state("strict", QueryState::Failed, WAIT).await;
    assert!(
        status.error.contains("data loss") && status.error.contains("\"again\""),
        "{}",
        status.error
    );
    // The lenient query reads the new records from the topic's start.
    client
        .wait_for("lenient", "reading the new topic", WAIT, |s| {
            s.latest_progress.as_ref().is_some_and(|p| {
                p.partitions
                    .iter()
                    .any(|p| p.end_offset == 20 && p.latest_offset == 20)
            })
        })
        .await;
    client.stop("lenient").await.expect("stop");
    let expected: Vec<u64> = (0..50).chain(100..120).collect();
    assert_eq!(sink_values(&lenient), expected);
}
