//! The Kafka sink's transactional ids: two queries that exist at once
//! never write with one `transactional_id_prefix` (tasks write under
//! `<prefix>-<task partition>`, so they would fence each other's
//! transactions). A second one is refused at submit, before any broker
//! is asked, naming the field and the other query.

use sluice_tests::cluster::Cluster;
use sluice_tests::kafka::{Broker, SCHEMA};

/// Reads topic `input` into topic `output`, exactly once.
fn spec(name: &str, servers: &str) -> String {
    format!(
        "name: {name}
source:
  kafka:
    bootstrap_servers: {servers}
    topic: input
    schema: {SCHEMA}
sql: SELECT value FROM input
sink:
  kafka:
    bootstrap_servers: {servers}
    topic: output
    delivery: exactly_once
"
    )
}

/// Two queries that exist at once never write with one transactional id
/// prefix (their tasks would fence each other's transactions): a second
/// one is refused at submit, naming the field and the other query, also
/// when the other is stopped, and also against another query's default
/// prefix. (No executor: the queries run no batch.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_query_with_the_same_transactional_id_prefix_is_refused() {
    let cluster = Cluster::new("kafka-sink-prefix");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("input", 1).await;
    broker.create_topic("output", 1).await;
    let driver = cluster.start_ready_driver().await;
    let mut client = cluster.client(driver.addr());
    let servers = broker.servers();
    let with_prefix = |name: &str, prefix: &str| {
        format!(
            "{}    transactional_id_prefix: {prefix}\n",
            spec(name, &servers)
        )
    };
    client
        .submit(&with_prefix("first", "shared"))
        .await
        .expect("the first query");
    client
        .submit(&spec("plain", &servers))
        .await
        .expect("a query with the default prefix");
    client.stop("first").await.expect("stop");
    for (text, prefix, other) in [
        (with_prefix("second", "shared"), "shared", "first"),
        (
            with_prefix("third", "sluice-plain"),
            "sluice-plain",
            "plain",
        ),
    ] {
        let err = client.submit(&text).await.expect_err("a prefix taken");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        for wanted in [
            "sink.kafka.transactional_id_prefix".to_string(),
            format!("{prefix:?}"),
            format!("query {other:?}"),
        ] {
            assert!(
                err.message().contains(&wanted),
                "{wanted}: {}",
                err.message()
            );
        }
    }
    client
        .submit(&with_prefix("fourth", "other"))
        .await
        .expect("a prefix of its own");
    let names: Vec<String> = client
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(names, ["first", "fourth", "plain"]);
}
