//! The Delta sink through a real cluster, read by outside readers
//! (`deltalake` and DuckDB's delta extension), whose rows must equal
//! DataFusion's over the whole input:
//! - a rate stream into a partitioned table while the driver is SIGKILLed
//!   between the table's commit and `commits/N` and at a random point, and
//!   an executor is SIGKILLed, with a compaction every 5 batches: the log
//!   holds each batch once, in order, and the compactions left a third of
//!   the files or fewer;
//! - the same on S3 (moto), read from the bucket;
//! - the file source into a table partitioned by a column with nulls,
//!   through an executor's SIGKILL;
//! - a query that would change a table is refused at submit.

use std::path::Path;
use std::time::Duration;

use sluice_common::sink::delta::LOG_DIR;
use sluice_common::sink::delta_compact::changes_of;
use sluice_tests::kafka::{self, KafkaCluster};
use sluice_tests::lake::{delta_txns, oracle_rows, read_delta, read_delta_with};
use sluice_tests::oracle::{expected_batches_with, normalized, rate_input, rate_start_ms};
use sluice_tests::{
    Cluster, DriverOpts, ExecutorOpts, QueryState, READY_TIMEOUT, S3, inputs, test_rng,
};

const TOTAL: u64 = 3000;
const RATE: u64 = 1000;
const SQL: &str = "SELECT value, value % 3 AS k, CAST(value * 7 AS VARCHAR) AS s, \
     timestamp_ms AS ts FROM input";

fn spec(table: &Path) -> String {
    format!(
        "name: lake\n\
         source: {{rate: {{rows_per_second: {RATE}, partitions: 3, total_rows: {TOTAL}}}}}\n\
         trigger: {{interval_ms: 50}}\n\
         max_rows_per_batch: 150\n\
         sql: \"{SQL}\"\n\
         sink: {{delta: {{path: {}, partition_by: [k], compact: {{every_batches: 5}}}}}}\n",
        table.display()
    )
}

/// How many data files the batches' commits added.
fn read_adds(table: &Path) -> usize {
    std::fs::read_dir(table.join(LOG_DIR))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .map(|bytes| {
            let changes = changes_of(&bytes, "commit").unwrap();
            match changes.compacted_by {
                Some(_) => 0,
                None => changes.added.len(),
            }
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_table_holds_each_row_once_across_driver_and_executor_kills() {
    let mut rng = test_rng();
    let cluster = Cluster::new("delta-sink");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let first = cluster.start_executor(&drivers);
    let _second = cluster.start_executor(&drivers);
    let table = cluster.root().join("lake");
    let mut client = cluster.client(&drivers);
    let id = client.submit(&spec(&table)).await.expect("submit").id;

    // Killed between a batch's table commit and its commits/N: the batch
    // is replayed, and its commit must find it in the table.
    driver.failpoint("delta-committed", true).await;
    let held = driver
        .wait_failpoint_hit("delta-committed", Duration::from_secs(60))
        .await;
    eprintln!("batch {held} held after its Delta commit; the driver is killed");
    driver.kill();
    driver.restart_ready().await;
    client
        .wait_for("lake", "reloaded", Duration::from_secs(30), |_| true)
        .await;
    tokio::time::sleep(rng.millis(100, 600)).await;
    first.kill();
    let _third = cluster.start_executor(&drivers);
    tokio::time::sleep(rng.millis(100, 600)).await;
    driver.kill();
    driver.restart_ready().await;

    let status = client
        .wait_state("lake", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert_eq!(status.id, id);

    let input = rate_input(
        rate_start_ms(&cluster.checkpoint_root(), "lake"),
        RATE,
        TOTAL,
    );
    let want = oracle_rows(&expected_batches_with(SQL, input, &[]).await);
    assert_eq!(want.len() as u64, TOTAL);
    let read = read_delta(&table, &id);
    assert_eq!(read.partition_columns, ["k"]);
    let by_deltalake = normalized(&read.deltalake);
    assert_eq!(by_deltalake.len(), want.len(), "deltalake's row count");
    assert_eq!(by_deltalake, want, "the rows deltalake reads");
    assert_eq!(normalized(&read.duckdb), want, "the rows DuckDB reads");

    let (log, compactions) = delta_txns(&table, &id);
    let batches: Vec<u64> = log.iter().map(|(_, b)| *b).collect();
    assert!(
        batches.windows(2).all(|w| w[1] == w[0] + 1) && batches[0] == 0,
        "each batch is committed once, in order: {log:?}"
    );
    assert!(batches.contains(&held), "the held batch is in the table");
    assert_eq!(read.txn, batches.last().map(|&b| b as i64));
    assert_eq!(read.version as usize + 1, log.len() + compactions);
    // Compaction every 5 batches: a few files per partition directory
    // remain of the batches' many.
    let written: usize = read_adds(&table);
    assert!(compactions >= 3, "{compactions} compactions");
    assert!(
        read.files * 3 < written,
        "{} files in the table of {written} written",
        read.files
    );
    eprintln!(
        "{} batch commits, {compactions} compactions, {} data files of {written}, {} rows",
        log.len(),
        read.files,
        by_deltalake.len()
    );
}

/// A query never changes a table's schema or partitioning, never
/// appends rows it may later change, and never writes a table whose
/// protocol asks for features it does not know: each is refused at
/// submit, naming the columns, the setting or the features. (Two queries of one driver never share a
/// table: their sinks' paths may not overlap.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_that_would_change_the_table_is_refused_at_submit() {
    let cluster = Cluster::new("delta-refused");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let table = cluster.root().join("t");
    let mut client = cluster.client(&drivers);
    let spec = |table: &Path, name: &str, sql: &str, extra: &str| {
        format!(
            "name: {name}\n\
             source: {{rate: {{rows_per_second: 100, partitions: 1, total_rows: 50}}}}\n\
             sql: \"{sql}\"\n\
             sink: {{delta: {{path: {}{extra}}}}}\n",
            table.display()
        )
    };
    let first = client
        .submit(&spec(
            &table,
            "first",
            "SELECT value, timestamp_ms FROM input",
            "",
        ))
        .await
        .expect("submit")
        .id;
    client
        .wait_state("first", QueryState::Finished, Duration::from_secs(60))
        .await;
    // Another deployment's query, with a checkpoint of its own, meets the
    // table as the first one left it.
    let other = Cluster::new("delta-refused-other");
    let copied = other.root().join("t");
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(&table)
        .arg(&copied)
        .status();
    assert!(copy.expect("cp runs").success());
    let other_driver = other.start_ready_driver().await;
    let other_client = other.client(other_driver.addr());
    let refused = |sql: &'static str, extra: &'static str| {
        let text = spec(&copied, "second", sql, extra);
        let mut client = other_client.clone();
        async move {
            let e = client.submit(&text).await.expect_err("refused");
            e.message().to_string()
        }
    };
    let m = refused(
        "SELECT CAST(value AS VARCHAR) AS value, 1 AS extra FROM input",
        "",
    )
    .await;
    assert!(
        m.contains("`value` is \"long\" in the table and \"string\"")
            && m.contains("`extra` is in the query's output, not in the table")
            && m.contains("`timestamp_ms` is in the table, not in the query's output"),
        "{m}"
    );
    let m = refused(
        "SELECT value, timestamp_ms FROM input",
        ", partition_by: [value]",
    )
    .await;
    assert!(
        m.contains("sink.delta.partition_by") && m.contains("[]"),
        "{m}"
    );
    let m = refused(
        "SELECT value % 2 AS k, count(*) AS n FROM input GROUP BY 1",
        "",
    )
    .await;
    assert!(
        m.contains("output_mode: update") && m.contains("append"),
        "{m}"
    );
    let m = refused("SELECT value, 0.5 AS f FROM input", ", partition_by: [f]").await;
    assert!(
        m.contains("sink.delta.partition_by[0]") && m.contains("\"f\""),
        "{m}"
    );
    // A table another writer upgraded to features Sluice does not write.
    let upgraded = other.root().join("dv");
    std::fs::create_dir_all(upgraded.join(LOG_DIR)).unwrap();
    let log = concat!(
        r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}"#,
        "\n",
        r#"{"metaData":{"id":"x","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":[],"configuration":{},"createdTime":0}}"#,
        "\n"
    );
    std::fs::write(upgraded.join(LOG_DIR).join(format!("{:020}.json", 0)), log).unwrap();
    let text = spec(
        &upgraded,
        "third",
        "SELECT value, timestamp_ms FROM input",
        "",
    );
    let e = other_client
        .clone()
        .submit(&text)
        .await
        .expect_err("refused");
    let m = e.message();
    assert!(
        m.contains("writer version 7") && m.contains("deletionVectors"),
        "{m}"
    );
    // The table is as the first query left it.
    let read = read_delta(&copied, &first);
    assert_eq!(read.deltalake.len(), 50);
}

/// On S3 (moto): the table's commits are conditional puts, the driver is
/// SIGKILLed after a batch's table commit, and both readers, reading
/// from the bucket, read the oracle's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_table_on_s3_holds_each_row_once_across_a_driver_kill() {
    const ROWS: u64 = 1200;
    let cluster = Cluster::new("delta-s3");
    let s3 = S3::start(&cluster, "moto", false).await;
    s3.create_bucket("lake").await;
    // The checkpoint stays on the local disk, beside the bucket.
    let allowed = format!("{},s3://lake/", cluster.root().display());
    let driver = cluster.start_driver_with(DriverOpts {
        env: s3.env(),
        extra_args: vec!["--allowed-paths".into(), allowed],
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let _executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            env: s3.env(),
            ..ExecutorOpts::default()
        },
    );
    let table = "s3://lake/events";
    let sql = "SELECT value, value % 2 AS k, timestamp_ms AS ts FROM input";
    let spec = format!(
        "name: s3lake\n\
         source: {{rate: {{rows_per_second: 600, partitions: 2, total_rows: {ROWS}}}}}\n\
         trigger: {{interval_ms: 100}}\n\
         sql: \"{sql}\"\n\
         sink: {{delta: {{path: \"{table}\", partition_by: [k], compact: {{every_batches: 4}}}}}}\n"
    );
    let mut client = cluster.client(driver.addr());
    let id = client.submit(&spec).await.expect("submit").id;
    driver.failpoint("delta-committed", true).await;
    driver
        .wait_failpoint_hit("delta-committed", Duration::from_secs(60))
        .await;
    driver.kill();
    driver.restart_ready().await;
    client
        .wait_state("s3lake", QueryState::Finished, Duration::from_secs(90))
        .await;
    let input = rate_input(
        rate_start_ms(&cluster.checkpoint_root(), "s3lake"),
        600,
        ROWS,
    );
    let want = oracle_rows(&expected_batches_with(sql, input, &[]).await);
    let read = read_delta_with(table, &id, &s3.env());
    read.assert_rows(&want);
    let batches = client
        .get("s3lake")
        .await
        .expect("status")
        .last_committed_batch;
    assert_eq!(read.txn, Some(batches), "the table's txn is the last batch");
}

/// The file source into a table partitioned by a column with nulls, an
/// executor SIGKILLed while files arrive: the readers read the oracle's
/// rows, the nulls in the null partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_into_a_delta_table_survive_an_executor_kill() {
    const FILES: u64 = 6;
    const ROWS: u64 = 300;
    let cluster = Cluster::new("delta-files");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let first = cluster.start_executor(&drivers);
    let _second = cluster.start_executor(&drivers);
    let input = cluster.root().join("in");
    std::fs::create_dir_all(&input).unwrap();
    for n in 0..FILES / 2 {
        inputs::write(
            &input,
            &format!("part-{n}.jsonl"),
            "jsonl",
            &inputs::rows(n, ROWS),
        );
    }
    let table = cluster.root().join("t");
    let sql = "SELECT id, ts, city, upper(tags) AS tags FROM input WHERE id % 5 <> 0";
    let files_sink = format!("sink:\n  files:\n    path: {}\n", table.display());
    let spec = inputs::spec("files", &input, "jsonl", &table, sql, FILES).replace(
        &files_sink,
        &format!(
            "sink:\n  delta:\n    path: {}\n    partition_by: [city]\n",
            table.display()
        ),
    );
    assert!(spec.contains("delta:"), "{spec}");
    let mut client = cluster.client(&drivers);
    let id = client.submit(&spec).await.expect("submit").id;
    client
        .wait_committed("files", 0, Duration::from_secs(60))
        .await;
    first.kill();
    for n in FILES / 2..FILES {
        inputs::write(
            &input,
            &format!("part-{n}.jsonl"),
            "jsonl",
            &inputs::rows(n, ROWS),
        );
    }
    client
        .wait_state("files", QueryState::Finished, Duration::from_secs(90))
        .await;
    let all: Vec<_> = (0..FILES).map(|n| inputs::rows(n, ROWS)).collect();
    let want = oracle_rows(&expected_batches_with(sql, all, &[]).await);
    let read = read_delta(&table, &id);
    read.assert_rows(&want);
    assert!(
        want.iter().any(|r| !r.contains("\"city\"")),
        "some cities are null"
    );
}

const KAFKA_SQL: &str = "SELECT value, city FROM input";

/// A Kafka topic (tansu) into a table, the driver SIGKILLed between a
/// batch's table commit and `commits/N` while records keep coming: every
/// record is in the table once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_into_a_delta_table_is_exactly_once_across_a_driver_kill() {
    let mut c = KafkaCluster::start("delta-kafka", "events", 4).await;
    kafka::produce(&c.kafka, "events", 4, 0..400).await;
    let table = c.cluster.root().join("t");
    let files_sink = format!(
        "sink:\n  files:\n    path: {}\n    format: jsonl\n",
        table.display()
    );
    let servers = c.broker.servers();
    let spec = kafka::spec(
        "events",
        &servers,
        "events",
        &table,
        "starting_offsets: earliest",
    )
    .replace(
        &files_sink,
        &format!("sink:\n  delta:\n    path: {}\n", table.display()),
    ) + &format!("sql: {KAFKA_SQL:?}\n");
    assert!(spec.contains("delta:"), "{spec}");
    let id = c.client.submit(&spec).await.expect("submit").id;
    kafka::wait_ends(&mut c.client, "events", 400).await;
    c.driver.failpoint("delta-committed", true).await;
    kafka::produce(&c.kafka, "events", 4, 400..700).await;
    c.driver
        .wait_failpoint_hit("delta-committed", Duration::from_secs(60))
        .await;
    c.driver.kill();
    kafka::produce(&c.kafka, "events", 4, 700..1000).await;
    c.driver.restart_ready().await;
    kafka::wait_ends(&mut c.client, "events", 1000).await;
    c.client.stop("events").await.expect("stop");

    let input = kafka::records_table(0..1000);
    let want = oracle_rows(&expected_batches_with(KAFKA_SQL, vec![input], &[]).await);
    let read = read_delta(&table, &id);
    read.assert_rows(&want);
}
