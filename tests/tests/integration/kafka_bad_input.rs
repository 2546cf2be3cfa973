//! Bad input to the Kafka source: a broker that cannot be reached, a topic
//! that does not exist and starting offsets that do not fit are refused at
//! submit, naming them; a malformed record fails the query naming its
//! offset, or is skipped and counted, as `on_bad_record` says.

use std::time::Duration;

use sluice_tests::kafka::{self, KafkaCluster, wait_read};
use sluice_tests::{QueryState, free_port};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_servers_topics_and_offsets_are_refused_at_submit_naming_them() {
    let c = KafkaCluster::start("kafka-refused", "orders", 2).await;
    let (broker, mut client) = (&c.broker, c.client.clone());
    let sink = c.cluster.sink_path("out");

    // Nothing listens on this port.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let spec = kafka::spec("nowhere", &nowhere, "orders", &sink, "");
    let err = client.submit(&spec).await.expect_err("no broker there");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let text = err.message();
    assert!(
        text.contains("source.kafka.bootstrap_servers") && text.contains(&nowhere),
        "{text}"
    );

    let spec = kafka::spec("missing", &broker.servers(), "no-such-topic", &sink, "");
    let err = client.submit(&spec).await.expect_err("no such topic");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let text = err.message();
    assert!(
        text.contains("source.kafka.topic")
            && text.contains("\"no-such-topic\" does not exist")
            && text.contains("orders"),
        "{text}"
    );

    let spec = kafka::spec(
        "half",
        &broker.servers(),
        "orders",
        &sink,
        "starting_offsets: {\"0\": 0}",
    );
    let err = client.submit(&spec).await.expect_err("partition 1 unnamed");
    assert!(
        err.message().contains("source.kafka.starting_offsets")
            && err.message().contains("partition 1"),
        "{err:?}"
    );
    let spec = kafka::spec(
        "beyond",
        &broker.servers(),
        "orders",
        &sink,
        "starting_offsets: {\"0\": 5, \"1\": 0}",
    );
    let err = client
        .submit(&spec)
        .await
        .expect_err("offset 5 of an empty partition");
    assert!(
        err.message().contains("offset 5") && err.message().contains("partition 0"),
        "{err:?}"
    );

    let spec = kafka::spec(
        "typo",
        &broker.servers(),
        "orders",
        &sink,
        "max_records: 10",
    );
    let err = client.submit(&spec).await.expect_err("unknown field");
    assert!(err.message().contains("max_records"), "{err:?}");
    // Nothing was created for the refused queries.
    assert!(client.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_record_fails_the_query_or_is_skipped_and_counted() {
    let mut c = KafkaCluster::start("kafka-malformed", "mixed", 1).await;
    let good = |n: u64| kafka::record(n);
    let values: Vec<Vec<u8>> = vec![
        good(0),
        good(1),
        b"{\"value\": 2, \"city\": ".to_vec(),
        good(3),
        b"[1, 2]".to_vec(),
        good(5),
    ];
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    kafka::produce_raw(&c.kafka, "mixed", 0, &refs).await;

    let (spec, _) = c.spec("strict", "mixed", "");
    c.client.submit(&spec).await.expect("submit");
    let status = c
        .client
        .wait_state("strict", QueryState::Failed, WAIT)
        .await;
    assert!(
        status
            .error
            .contains("kafka topic \"mixed\" partition 0 offset 2")
            && status.error.contains("not a JSON record"),
        "{}",
        status.error
    );

    let (spec, _) = c.spec("lenient", "mixed", "on_bad_record: skip");
    c.client.submit(&spec).await.expect("submit");
    wait_read(&mut c.client, "lenient", "read to offset 6", |p| {
        p.iter().any(|p| p.end_offset == 6)
    })
    .await;
    let progress = c.client.progress("lenient").await.expect("progress");
    let bad: u64 = progress.iter().map(|p| p.bad_records).sum();
    let rows: u64 = progress.iter().map(|p| p.num_input_rows).sum();
    assert_eq!((bad, rows), (2, 4), "{progress:#?}");
    c.client.stop("lenient").await.expect("stop");
}
