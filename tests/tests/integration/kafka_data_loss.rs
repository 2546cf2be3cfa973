//! Records a Kafka query has not read yet disappear: retention deletes
//! them, or the topic is deleted and recreated. With `fail_on_data_loss:
//! true` the query fails naming the topic, partition and offsets; with
//! `false` it skips them, counts them in its progress, and reads on.

use std::time::Duration;

use sluice_tests::QueryState;
use sluice_tests::kafka::{self, KafkaCluster, sink_values, wait_read};

const WAIT: Duration = Duration::from_secs(60);

/// Waits until `query` has read partition 0 of its topic up to `end`.
async fn wait_end(c: &mut KafkaCluster, query: &str, end: i64) {
    let what = format!("read to offset {end}");
    wait_read(&mut c.client, query, &what, |p| {
        p.iter().any(|p| p.end_offset >= end)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_fail_the_query_or_are_skipped_and_counted() {
    let mut c = KafkaCluster::start("kafka-retention", "kept", 1).await;
    c.broker.create_topic("lossy", 1).await;
    for topic in ["kept", "lossy"] {
        kafka::produce(&c.kafka, topic, 1, 0..100).await;
    }
    // Ten records a batch, a batch every 300 ms: the queries are far behind.
    let slow = "max_records_per_partition: 10";
    let (spec, _) = c.spec("kept", "kept", slow);
    let spec = spec.replace("interval_ms: 100", "interval_ms: 300");
    c.client.submit(&spec).await.expect("submit");
    let (spec, lenient) = c.spec(
        "lossy",
        "lossy",
        &format!("{slow}\nfail_on_data_loss: false"),
    );
    let spec = spec.replace("interval_ms: 100", "interval_ms: 300");
    c.client.submit(&spec).await.expect("submit");
    wait_end(&mut c, "kept", 20).await;
    wait_end(&mut c, "lossy", 20).await;

    // While the driver is down, retention deletes offsets 0..60 of both.
    c.driver.kill();
    c.broker.delete_records_below(&c.cluster, "kept", 0, 60);
    c.broker.delete_records_below(&c.cluster, "lossy", 0, 60);
    c.driver.restart_ready().await;

    let status = c.client.wait_state("kept", QueryState::Failed, WAIT).await;
    let error = &status.error;
    assert!(
        error.contains("data loss")
            && error.contains("\"kept\" partition 0")
            && error.contains("are gone")
            && error.contains("60"),
        "{error}"
    );

    wait_end(&mut c, "lossy", 100).await;
    let progress = c.client.progress("lossy").await.expect("progress");
    let lost: u64 = progress.iter().map(|p| p.records_lost).sum();
    c.client.stop("lossy").await.expect("stop");
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
    let mut c = KafkaCluster::start("kafka-recreated", "again", 1).await;
    kafka::produce(&c.kafka, "again", 1, 0..50).await;
    let (spec, _) = c.spec("strict", "again", "");
    c.client.submit(&spec).await.expect("submit");
    let (spec, lenient) = c.spec("lenient", "again", "fail_on_data_loss: false");
    c.client.submit(&spec).await.expect("submit");
    wait_end(&mut c, "strict", 50).await;
    wait_end(&mut c, "lenient", 50).await;

    // The topic is deleted and created again, with fewer records than the
    // queries had read: its offsets start again at 0.
    c.broker.drop_topic(&c.cluster, "again");
    c.broker.create_topic("again", 1).await;
    kafka::produce(&c.kafka, "again", 1, 100..120).await;

    let status = c
        .client
        .wait_state("strict", QueryState::Failed, WAIT)
        .await;
    assert!(
        status.error.contains("data loss") && status.error.contains("\"again\""),
        "{}",
        status.error
    );
    // The lenient query reads the new records from the topic's start.
    wait_read(&mut c.client, "lenient", "reading the new topic", |p| {
        p.iter()
            .any(|p| p.end_offset == 20 && p.latest_offset == 20)
    })
    .await;
    c.client.stop("lenient").await.expect("stop");
    let expected: Vec<u64> = (0..50).chain(100..120).collect();
    assert_eq!(sink_values(&lenient), expected);
}
