//! The Kafka source against a real broker (tansu): a topic read end to end
//! with its Kafka columns, `starting_offsets` used only on the first start,
//! the per-partition cap, a partition added while running, and raw records.

use sluice_common::checkpoint::SourceOffsets;
use sluice_tests::kafka::{self, KafkaCluster, sink_rows, sink_values, wait_ends, wait_read};
use sluice_tests::{assert_exactly_once, offset_records};

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
    let mut c = KafkaCluster::start("kafka-restart", "events", 4).await;
    kafka::produce(&c.kafka, "events", 4, 0..400).await;
    let (spec, sink) = c.spec("events", "events", "starting_offsets: earliest");
    c.client.submit(&spec).await.expect("submit");
    let status = wait_ends(&mut c.client, "events", 400).await;

    let progress = status.latest_progress.expect("progress");
    assert_eq!(progress.partitions.len(), 4, "{progress:#?}");
    for p in &progress.partitions {
        assert_eq!(
            (p.end_offset, p.latest_offset, p.lag),
            (100, 100, 0),
            "{p:?}"
        );
        let series = format!(
            "sluice_kafka_lag_records{{partition=\"{}\",query=\"events\",topic=\"events\"}}",
            p.partition
        );
        assert_eq!(c.driver.metric(&series).await, Some(0.0), "{series}");
    }
    // A record's row carries its partition, offset and timestamp.
    for row in sink_rows(&sink) {
        let value = row["value"].as_u64().unwrap();
        assert_eq!(row["kafka_partition"].as_u64(), Some(value % 4), "{row}");
        assert_eq!(row["kafka_offset"].as_u64(), Some(value / 4), "{row}");
        assert!(row["kafka_timestamp"].as_i64().is_some(), "{row}");
        assert!(row["city"].as_str().is_some(), "{row}");
    }

    // The driver dies; records keep coming; it restarts with the same spec
    // (`starting_offsets: earliest`), and resumes where the checkpoint is.
    c.driver.kill();
    kafka::produce(&c.kafka, "events", 4, 400..1000).await;
    c.driver.restart_ready().await;
    let status = wait_ends(&mut c.client, "events", 1000).await;
    // Counted on from what the checkpoint's last commit recorded.
    assert_eq!(status.committed_rows, 1000);
    c.client.stop("events").await.expect("stop");
    assert_exactly_once(&sink, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_starts_after_the_records_present_at_submit_and_the_cap_bounds_batches() {
    let mut c = KafkaCluster::start("kafka-latest", "clicks", 2).await;
    kafka::produce(&c.kafka, "clicks", 2, 0..100).await;
    let extra = "starting_offsets: latest\nmax_records_per_partition: 40";
    let (spec, sink) = c.spec("clicks", "clicks", extra);
    c.client.submit(&spec).await.expect("submit");
    // 300 more records, 150 a partition: at most 40 a partition a batch.
    kafka::produce(&c.kafka, "clicks", 2, 100..400).await;
    // 50 a partition before the submit, 150 after.
    let status = wait_ends(&mut c.client, "clicks", 400).await;
    assert_eq!(status.committed_rows, 300, "rows read, not offsets");
    c.client.stop("clicks").await.expect("stop");

    let plans = offset_records(&c.cluster.checkpoint_root(), "clicks");
    let first = ranges(plans[0].inputs.single().expect("one source"));
    assert!(first.iter().all(|&(_, start, _)| start == 50), "{first:?}");
    for plan in &plans {
        for (p, start, end) in ranges(plan.inputs.single().expect("one source")) {
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
    assert_eq!(sink_values(&sink), (100..400).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_added_while_the_query_runs_is_read_from_its_start() {
    let mut c = KafkaCluster::start("kafka-grow", "grow", 2).await;
    kafka::produce(&c.kafka, "grow", 2, 0..200).await;
    let (spec, sink) = c.spec("grow", "grow", "");
    c.client.submit(&spec).await.expect("submit");
    wait_ends(&mut c.client, "grow", 200).await;

    // Partition 2 appears; records go to all three.
    c.broker.add_partition(&c.cluster, "grow", 2);
    // A client that reads the metadata anew.
    let k = c.broker.client().await;
    let counts = kafka::produce(&k, "grow", 3, 200..500).await;
    let end = counts[2] as i64;
    wait_read(&mut c.client, "grow", "reading partition 2", |p| {
        p.iter().any(|p| p.partition == 2 && p.end_offset == end)
    })
    .await;
    wait_ends(&mut c.client, "grow", 500).await;
    c.client.stop("grow").await.expect("stop");
    assert_exactly_once(&sink, 500).await;
    let plans = offset_records(&c.cluster.checkpoint_root(), "grow");
    let first_with_2 = plans
        .iter()
        .flat_map(|p| ranges(p.inputs.single().expect("one source")))
        .find(|&(p, _, _)| p == 2)
        .expect("a batch read partition 2");
    assert_eq!(
        first_with_2.1, 0,
        "partition 2 was read from its earliest offset"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_records_give_their_key_and_value_as_bytes() {
    let mut c = KafkaCluster::start("kafka-raw", "raw", 1).await;
    let values: [&[u8]; 3] = [b"plain text", b"{\"not\": \"parsed\"}", b""];
    kafka::produce_raw(&c.kafka, "raw", 0, &values).await;
    let sink = c.cluster.sink_path("raw");
    let spec = format!(
        "name: raw\nsource:\n  kafka:\n    bootstrap_servers: {}\n    topic: raw\n    format: raw\n\
         sql: SELECT CAST(value AS VARCHAR) AS text, key IS NULL AS keyless, kafka_offset FROM input\n\
         sink:\n  files:\n    path: {}\n",
        c.broker.servers(),
        sink.display()
    );
    c.client.submit(&spec).await.expect("submit");
    wait_ends(&mut c.client, "raw", 3).await;
    c.client.stop("raw").await.expect("stop");
    let mut rows = sink_rows(&sink);
    rows.sort_by_key(|r| r["kafka_offset"].as_i64());
    let texts: Vec<&str> = rows.iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["plain text", "{\"not\": \"parsed\"}", ""]);
    assert!(rows.iter().all(|r| r["keyless"] == true), "{rows:?}");
}
