//! Bad input to the Kafka source: a broker that cannot be reached, a topic
//! that does not exist and starting offsets that do not fit are refused at
//! submit, naming them; a malformed record fails the query naming its
//! offset, or is skipped and counted, as `on_bad_record` says.

use std::time::Duration;

use sluice_tests::kafka::{self, Broker};
use sluice_tests::{Cluster, QueryState, free_port};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_servers_topics_and_offsets_are_refused_at_submit_naming_them() {
    let cluster = Cluster::new("kafka-refused");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("orders", 2).await;
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path("out");

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
    let cluster = Cluster::new("kafka-malformed");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("mixed", 1).await;
    let k = broker.client().await;
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
    kafka::produce_raw(&k, "mixed", 0, &refs).await;

    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    let strict = cluster.sink_path("strict");
    let spec = kafka::spec("strict", &broker.servers(), "mixed", &strict, "");
    client.submit(&spec).await.expect("submit");
    let status = client.wait_state("strict", QueryState::Failed, WAIT).await;
    assert!(
        status
            .error
            .contains("kafka topic \"mixed\" partition 0 offset 2")
            && status.error.contains("not a JSON record"),
        "{}",
        status.error
    );

    let lenient = cluster.sink_path("lenient");
    let spec = kafka::spec(
        "lenient",
        &broker.servers(),
        "mixed",
        &lenient,
        "on_bad_record: skip",
    );
    client.submit(&spec).await.expect("submit");
    let status = client
        .wait_for("lenient", "read to offset 6", WAIT, |s| {
            s.latest_progress
                .as_ref()
                .is_some_and(|p| p.partitions.iter().any(|p| p.end_offset == 6))
        })
        .await;
    assert_eq!(status.state, QueryState::Running as i32, "{status:#?}");
    let progress = client.progress("lenient").await.expect("progress");
    let bad: u64 = progress.iter().map(|p| p.bad_records).sum();
    let rows: u64 = progress.iter().map(|p| p.num_input_rows).sum();
    assert_eq!((bad, rows), (2, 4), "{progress:#?}");
    client.stop("lenient").await.expect("stop");
}
