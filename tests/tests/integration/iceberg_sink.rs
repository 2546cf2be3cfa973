//! The Iceberg sink through a real cluster, with its SQL catalog in a
//! SQLite file, read by outside readers (pyiceberg through the catalog,
//! and DuckDB's iceberg extension), whose rows must equal DataFusion's
//! over the whole input:
//! - a rate stream into a new table while the driver is SIGKILLed between
//!   a batch's snapshot and its `commits/N` and at a random point, and an
//!   executor is SIGKILLed: the table's snapshots hold each batch once, in
//!   order;
//! - another writer (pyiceberg) appending to the table while the query
//!   does: the query builds each snapshot on the other writer's, and no
//!   row of either is lost;
//! - the file source through an executor's SIGKILL, and a Kafka topic
//!   (tansu) through a driver's SIGKILL between a snapshot and
//!   `commits/N`, each row once;
//! - a query whose output does not fit an existing table, or that would
//!   change rows it appended, is refused at submit, naming the columns or
//!   the setting.

use std::path::Path;
use std::time::Duration;

use sluice_common::sink::iceberg::catalog::SqlTable;
use sluice_tests::kafka::{self, KafkaCluster};
use sluice_tests::lake::{append_iceberg, oracle_rows, read_iceberg};
use sluice_tests::oracle::{expected_batches_with, rate_input, rate_start_ms};
use sluice_tests::{Cluster, QueryState, inputs, test_rng};

const TOTAL: u64 = 3000;
const RATE: u64 = 1000;
const SQL: &str = "SELECT value, value % 3 AS k, CAST(value * 7 AS VARCHAR) AS s, \
     timestamp_ms AS ts FROM input";

/// The `sink:` of a query into table `lake.<table>` of the catalog
/// under `root`.
fn sink(root: &Path, table: &str) -> String {
    format!(
        "sink: {{iceberg: {{catalog: {{sql: {{uri: 'sqlite://{}'}}}}, warehouse: {}, \
         namespace: lake, table: {table}}}}}\n",
        root.join("catalog.db").display(),
        root.join("warehouse").display(),
    )
}

fn spec(name: &str, root: &Path, table: &str, sql: &str) -> String {
    format!(
        "name: {name}\n\
         source: {{rate: {{rows_per_second: {RATE}, partitions: 3, total_rows: {TOTAL}}}}}\n\
         trigger: {{interval_ms: 50}}\n\
         max_rows_per_batch: 150\n\
         sql: \"{sql}\"\n{}",
        sink(root, table)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iceberg_table_holds_each_row_once_across_driver_and_executor_kills() {
    let mut rng = test_rng();
    let cluster = Cluster::new("iceberg-sink");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let first = cluster.start_executor(&drivers);
    let _second = cluster.start_executor(&drivers);
    let root = cluster.root().to_path_buf();
    let mut client = cluster.client(&drivers);
    let compacting = spec("ice", &root, "events", SQL).replace(
        "table: events}",
        "table: events, compact: {every_batches: 5}}",
    );
    assert!(compacting.contains("compact"), "{compacting}");
    let id = client.submit(&compacting).await.expect("submit").id;

    // Killed between a batch's snapshot and its commits/N: the batch is
    // replayed, and its commit must find it in the table.
    driver.failpoint("sink-committed", true).await;
    let held = driver
        .wait_failpoint_hit("sink-committed", Duration::from_secs(60))
        .await;
    eprintln!("batch {held} held after its Iceberg commit; the driver is killed");
    driver.kill();
    driver.restart_ready().await;
    client
        .wait_for("ice", "reloaded", Duration::from_secs(30), |_| true)
        .await;
    tokio::time::sleep(rng.millis(100, 600)).await;
    first.kill();
    let _third = cluster.start_executor(&drivers);
    tokio::time::sleep(rng.millis(100, 600)).await;
    driver.kill();
    driver.restart_ready().await;

    let status = client
        .wait_state("ice", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let input = rate_input(
        rate_start_ms(&cluster.checkpoint_root(), "ice"),
        RATE,
        TOTAL,
    );
    let want = oracle_rows(&expected_batches_with(SQL, input, &[]).await);
    assert_eq!(want.len() as u64, TOTAL);
    let read = read_iceberg(&root.join("catalog.db"), "default", "lake", "events");
    read.assert_rows(&want);
    let batches = read.batches_of(&id);
    assert!(
        batches.windows(2).all(|w| w[1] > w[0]),
        "each batch is in the table once, in order: {batches:?}"
    );
    assert!(batches.contains(&held), "the held batch is in the table");
    let compactions = read
        .snapshots
        .iter()
        .filter(|s| s.get("sluice.compacted-by") == Some(&id))
        .count();
    assert_eq!(
        read.snapshots.len(),
        batches.len() + compactions,
        "no snapshot of another writer"
    );
    // Compaction every 5 batches: a few files remain of the batches' many.
    let written: usize = read
        .snapshots
        .iter()
        .filter(|s| s.contains_key("sluice.batch"))
        .map(|s| s["added-data-files"].parse::<usize>().unwrap())
        .sum();
    assert!(compactions >= 3, "{compactions} compactions");
    assert!(
        read.files * 3 < written,
        "{} files of {written} written",
        read.files
    );
    eprintln!(
        "{} batch snapshots, {compactions} compactions, {} data files of {written}, {} rows",
        batches.len(),
        read.files,
        want.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_that_does_not_fit_the_table_is_refused_at_submit() {
    let cluster = Cluster::new("iceberg-refused");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let root = cluster.root().to_path_buf();
    let mut client = cluster.client(&drivers);
    client
        .submit(&spec("first", &root, "events", SQL))
        .await
        .expect("submit");
    client
        .wait_state("first", QueryState::Finished, Duration::from_secs(120))
        .await;

    let other = "SELECT value, CAST(value AS DOUBLE) AS k FROM input";
    let e = client
        .submit(&spec("second", &root, "events", other))
        .await
        .expect_err("a changed schema is refused");
    let m = e.message();
    assert!(
        m.contains("\"k\" is long in the table, double in the output")
            && m.contains("\"s\" of the table is not in the output"),
        "{m}"
    );
    let counts = "SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3";
    let e = client
        .submit(&spec("third", &root, "counts", counts))
        .await
        .expect_err("update output is refused");
    assert!(e.message().contains("output_mode"), "{}", e.message());
    // A catalog row another writer set, naming a metadata file outside the
    // allowed paths: never read.
    let elsewhere = SqlTable {
        file: root.join("catalog.db"),
        catalog: "default".into(),
        namespace: "lake".into(),
        table: "elsewhere".into(),
    };
    assert!(elsewhere.create("/etc/hostname".into()).await.unwrap());
    let e = client
        .submit(&spec("fifth", &root, "elsewhere", SQL))
        .await
        .expect_err("a metadata file outside the allowed paths is refused");
    let m = e.message();
    assert!(
        m.contains("the metadata file") && m.contains("/etc/hostname"),
        "{m}"
    );
    let e = client
        .submit(&spec("fourth", &root, "t", SQL).replace("sqlite://", "sqlite:"))
        .await
        .expect_err("a bad catalog URI is refused");
    assert!(
        e.message().contains("sink.iceberg.catalog.sql.uri"),
        "{}",
        e.message()
    );
}

/// The file source, an executor SIGKILLed while files arrive: the readers
/// read the oracle's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_into_an_iceberg_table_survive_an_executor_kill() {
    const FILES: u64 = 6;
    const ROWS: u64 = 300;
    let cluster = Cluster::new("iceberg-files");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let first = cluster.start_executor(&drivers);
    let _second = cluster.start_executor(&drivers);
    let root = cluster.root().to_path_buf();
    let input = root.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let write = |n: u64| {
        let name = format!("part-{n}.jsonl");
        inputs::write(&input, &name, "jsonl", &inputs::rows(n, ROWS));
    };
    (0..FILES / 2).for_each(write);
    let out = root.join("out");
    let sql = "SELECT id, ts, city, upper(tags) AS tags FROM input WHERE id % 5 <> 0";
    let files_sink = format!("sink:\n  files:\n    path: {}\n", out.display());
    let spec = inputs::spec("files", &input, "jsonl", &out, sql, FILES)
        .replace(&files_sink, &sink(&root, "files"));
    assert!(spec.contains("iceberg:"), "{spec}");
    let mut client = cluster.client(&drivers);
    let id = client.submit(&spec).await.expect("submit").id;
    client
        .wait_committed("files", 0, Duration::from_secs(60))
        .await;
    first.kill();
    (FILES / 2..FILES).for_each(write);
    client
        .wait_state("files", QueryState::Finished, Duration::from_secs(90))
        .await;
    let all: Vec<_> = (0..FILES).map(|n| inputs::rows(n, ROWS)).collect();
    let want = oracle_rows(&expected_batches_with(sql, all, &[]).await);
    let read = read_iceberg(&root.join("catalog.db"), "default", "lake", "files");
    read.assert_rows(&want);
    assert!(!read.batches_of(&id).is_empty());
}

const KAFKA_SQL: &str = "SELECT value, city FROM input";

/// A Kafka topic (tansu) into a table, the driver SIGKILLed between a
/// batch's snapshot and `commits/N` while records keep coming: every
/// record is in the table once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_into_an_iceberg_table_is_exactly_once_across_a_driver_kill() {
    let mut c = KafkaCluster::start("iceberg-kafka", "events", 4).await;
    kafka::produce(&c.kafka, "events", 4, 0..400).await;
    let root = c.cluster.root().to_path_buf();
    let out = root.join("out");
    let files_sink = format!(
        "sink:\n  files:\n    path: {}\n    format: jsonl\n",
        out.display()
    );
    let servers = c.broker.servers();
    let spec = kafka::spec(
        "events",
        &servers,
        "events",
        &out,
        "starting_offsets: earliest",
    )
    .replace(&files_sink, &sink(&root, "events"))
        + &format!("sql: {KAFKA_SQL:?}\n");
    assert!(spec.contains("iceberg:"), "{spec}");
    let id = c.client.submit(&spec).await.expect("submit").id;
    kafka::wait_ends(&mut c.client, "events", 400).await;
    c.driver.failpoint("sink-committed", true).await;
    kafka::produce(&c.kafka, "events", 4, 400..700).await;
    let held = c
        .driver
        .wait_failpoint_hit("sink-committed", Duration::from_secs(60))
        .await;
    c.driver.kill();
    kafka::produce(&c.kafka, "events", 4, 700..1000).await;
    c.driver.restart_ready().await;
    kafka::wait_ends(&mut c.client, "events", 1000).await;
    c.client.stop("events").await.expect("stop");

    let input = kafka::records_table(0..1000);
    let want = oracle_rows(&expected_batches_with(KAFKA_SQL, vec![input], &[]).await);
    let read = read_iceberg(&root.join("catalog.db"), "default", "lake", "events");
    read.assert_rows(&want);
    let batches = read.batches_of(&id);
    assert!(batches.contains(&held), "{batches:?} holds batch {held}");
    assert!(batches.windows(2).all(|w| w[1] > w[0]), "{batches:?}");
}

/// pyiceberg appends snapshots to the query's table while the query
/// appends its batches: each commit of the query that finds the table
/// moved builds its snapshot again on the other writer's, so the table
/// holds every row of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writers_snapshots_are_kept_beside_the_querys() {
    const SQL: &str = "SELECT value FROM input";
    const THEIRS: u64 = 15;
    let cluster = Cluster::new("iceberg-two-writers");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let root = cluster.root().to_path_buf();
    let mut client = cluster.client(&drivers);
    let id = client
        .submit(&spec("both", &root, "shared", SQL))
        .await
        .expect("submit")
        .id;
    client
        .wait_committed("both", 0, Duration::from_secs(60))
        .await;
    let catalog = root.join("catalog.db");
    let theirs = tokio::task::spawn_blocking(move || {
        append_iceberg(&catalog, "default", ("lake", "shared"), (-1000, THEIRS))
    });
    let lost = theirs.await.expect("the other writer ran");
    let status = client
        .wait_state("both", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let input = rate_input(
        rate_start_ms(&cluster.checkpoint_root(), "both"),
        RATE,
        TOTAL,
    );
    let mut want = oracle_rows(&expected_batches_with(SQL, input, &[]).await);
    want.extend((-1000..-1000 + THEIRS as i64).map(|v| format!("{{\"value\":{v}}}")));
    let want = sluice_tests::oracle::normalized(&want);
    let read = read_iceberg(&root.join("catalog.db"), "default", "lake", "shared");
    read.assert_rows(&want);
    let ours = read.batches_of(&id);
    assert!(ours.windows(2).all(|w| w[1] > w[0]), "{ours:?}");
    assert_eq!(read.snapshots.len(), ours.len() + THEIRS as usize);
    // Newest first: the other writer's snapshots above the query's first
    // one came while the query appended, so the query's next commit found
    // the table moved.
    let ours_at =
        |s: &std::collections::BTreeMap<String, String>| s.contains_key("sluice.query-id");
    let first_ours = read
        .snapshots
        .iter()
        .rposition(ours_at)
        .expect("the query's snapshots");
    let between = read.snapshots[..first_ours]
        .iter()
        .filter(|s| !ours_at(s))
        .count();
    assert!(between > 0, "the other writer appended while the query did");
    eprintln!(
        "{} snapshots of the query, {THEIRS} of pyiceberg ({between} after the query's first; \
         {lost} of its commits lost a race)",
        ours.len()
    );
}
