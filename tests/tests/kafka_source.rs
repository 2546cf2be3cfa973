//! The Kafka source against a real broker (tansu): a topic read end to end
//! with its Kafka columns, `starting_offsets` used only on the first start,
//! and the per-partition cap.

use std::time::Duration;

use sluice_common::checkpoint::SourceOffsets;
use sluice_tests::kafka::{self, Broker};
use sluice_tests::{Client, Cluster, QueryState, assert_exactly_once, offset_records};

const WAIT: Duration = Duration::from_secs(60);

/// Waits until the query's partitions have been read up to end offsets
/// that add up to `ends`, and it is still running.
async fn wait_ends(client: &mut Client, query: &str, ends: i64) {
    client
        .wait_for(
            query,
            &format!("read to offsets adding up to {ends}"),
            WAIT,
            |s| {
                assert_eq!(s.state, QueryState::Running as i32, "{s:#?}");
                s.latest_progress
                    .as_ref()
                    .is_some_and(|p| p.partitions.iter().map(|p| p.end_offset).sum::<i64>() >= ends)
            },
        )
        .await;
}

fn ranges(offsets: &SourceOffsets) -> Vec<(i32, i64, i64)> {
    match offsets {
        SourceOffsets::Kafka { partitions } => partitions
            .iter()
            .map(|r| (r.partition, r.start, r.end))
            .collect(),
        other => panic!("not kafka offsets: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_is_read_once_and_a_restart_resumes_from_the_checkpoint() {
    let cluster = Cluster::new("kafka-restart");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("events", 4).await;
    let k = broker.client().await;
    kafka::produce(&k, "events", 4, 0..400).await;

    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let sink = cluster.sink_path("events");
    let spec = kafka::spec(
        "events",
        &broker.servers(),
        "events",
        &sink,
        "starting_offsets: earliest",
    );
    let mut client = cluster.client(&drivers);
    client.submit(&spec).await.expect("submit");
    wait_ends(&mut client, "events", 400).await;

    // A record's row carries its partition, offset and timestamp.
    let status = client.get("events").await.expect("get");
    let progress = status.latest_progress.expect("progress");
    assert_eq!(progress.partitions.len(), 4, "{progress:#?}");
    for p in &progress.partitions {
        assert_eq!(
            (p.end_offset, p.latest_offset, p.lag),
            (100, 100, 0),
            "{p:?}"
        );
    }
    let row = first_row(&sink);
    for column in [
        "value",
        "city",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
    ] {
        assert!(row.get(column).is_some(), "no {column} in {row}");
    }
    for p in 0..4 {
        let lag = driver
            .metric(&format!(
                "sluice_kafka_lag_records{{partition=\"{p}\",query=\"events\",topic=\"events\"}}"
            ))
            .await;
        assert_eq!(lag, Some(0.0), "partition {p}");
    }
    let value = row["value"].as_u64().unwrap();
    assert_eq!(row["kafka_partition"].as_u64().unwrap(), value % 4, "{row}");
    assert_eq!(row["kafka_offset"].as_u64().unwrap(), value / 4, "{row}");

    // The driver dies; records keep coming; it restarts with the same spec
    // (`starting_offsets: earliest`), and resumes where the checkpoint is.
    driver.kill();
    kafka::produce(&k, "events", 4, 400..1000).await;
    driver.restart_ready().await;
    wait_ends(&mut client, "events", 1000).await;
    client.stop("events").await.expect("stop");
    assert_exactly_once(&sink, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_starts_after_the_records_present_at_submit_and_the_cap_bounds_batches() {
    let cluster = Cluster::new("kafka-latest");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("clicks", 2).await;
    let k = broker.client().await;
    kafka::produce(&k, "clicks", 2, 0..100).await;

    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let sink = cluster.sink_path("clicks");
    let spec = kafka::spec(
        "clicks",
        &broker.servers(),
        "clicks",
        &sink,
        "starting_offsets: latest\nmax_records_per_partition: 40",
    );
    let mut client = cluster.client(&drivers);
    client.submit(&spec).await.expect("submit");
    // 300 more records, 150 a partition: at most 40 a partition a batch.
    kafka::produce(&k, "clicks", 2, 100..400).await;
    // 50 a partition before the submit, 150 after.
    wait_ends(&mut client, "clicks", 400).await;
    client.stop("clicks").await.expect("stop");

    let plans = offset_records(&cluster.checkpoint_root(), "clicks");
    let first = ranges(&plans[0].source);
    assert!(first.iter().all(|&(_, start, _)| start == 50), "{first:?}");
    for plan in &plans {
        for (p, start, end) in ranges(&plan.source) {
            assert!(
                end - start <= 40,
                "batch {} partition {p}: {start}..{end}",
                plan.batch_id
            );
        }
    }
    assert!(
        plans.len() >= 4,
        "150 records a partition need 4 batches of 40"
    );
    // Exactly the records produced after the submit.
    let values = sink_values(&sink);
    assert_eq!(values, (100..400).collect::<Vec<u64>>());
}

/// The first row of a jsonl sink.
fn first_row(sink: &std::path::Path) -> serde_json::Value {
    let file = sluice_tests::files_under(sink)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "jsonl"))
        .expect("a sink file");
    let text = std::fs::read_to_string(&file).unwrap();
    serde_json::from_str(text.lines().next().expect("a row")).unwrap()
}

/// Every `value` in the jsonl files of a sink, sorted.
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
async fn a_partition_added_while_the_query_runs_is_read_from_its_start() {
    let cluster = Cluster::new("kafka-grow");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("grow", 2).await;
    let k = broker.client().await;
    kafka::produce(&k, "grow", 2, 0..200).await;
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let sink = cluster.sink_path("grow");
    let spec = kafka::spec("grow", &broker.servers(), "grow", &sink, "");
    let mut client = cluster.client(&drivers);
    client.submit(&spec).await.expect("submit");
    wait_ends(&mut client, "grow", 200).await;

    // Partition 2 appears; records go to all three.
    broker.add_partition(&cluster, "grow", 2);
    // A client that reads the metadata anew.
    let k = broker.client().await;
    let counts = kafka::produce(&k, "grow", 3, 200..500).await;
    client
        .wait_for("grow", "reading partition 2", WAIT, |s| {
            s.latest_progress.as_ref().is_some_and(|p| {
                p.partitions
                    .iter()
                    .any(|p| p.partition == 2 && p.end_offset == counts[2] as i64)
            })
        })
        .await;
    wait_ends(&mut client, "grow", 500).await;
    client.stop("grow").await.expect("stop");
    assert_exactly_once(&sink, 500).await;
    let plans = offset_records(&cluster.checkpoint_root(), "grow");
    let first_with_2 = plans
        .iter()
        .flat_map(|p| ranges(&p.source))
        .find(|&(p, _, _)| p == 2)
        .expect("a batch read partition 2");
    assert_eq!(
        first_with_2.1, 0,
        "partition 2 was read from its earliest offset"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_records_give_their_key_and_value_as_bytes() {
    let cluster = Cluster::new("kafka-raw");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("raw", 1).await;
    let k = broker.client().await;
    kafka::produce_raw(
        &k,
        "raw",
        0,
        &[b"plain text", b"{\"not\": \"parsed\"}", b""],
    )
    .await;
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let sink = cluster.sink_path("raw");
    let spec = format!(
        "name: raw\nsource:\n  kafka:\n    bootstrap_servers: {}\n    topic: raw\n    format: raw\n\
         sql: SELECT CAST(value AS VARCHAR) AS text, key IS NULL AS keyless, kafka_offset FROM input\n\
         sink:\n  files:\n    path: {}\n",
        broker.servers(),
        sink.display()
    );
    let mut client = cluster.client(&drivers);
    client.submit(&spec).await.expect("submit");
    wait_ends(&mut client, "raw", 3).await;
    client.stop("raw").await.expect("stop");
    let mut rows: Vec<serde_json::Value> = sluice_tests::files_under(&sink)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
        .flat_map(|f| {
            std::fs::read_to_string(&f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort_by_key(|r| r["kafka_offset"].as_i64());
    let texts: Vec<&str> = rows.iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["plain text", "{\"not\": \"parsed\"}", ""]);
    assert!(rows.iter().all(|r| r["keyless"] == true), "{rows:?}");
}
