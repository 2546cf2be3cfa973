//! The Iceberg sink through a real cluster, with its SQL catalog in a
//! SQLite file, read by outside readers (pyiceberg through the catalog,
//! and DuckDB's iceberg extension), whose rows must equal DataFusion's
//! over the whole input:
//! - a rate stream into a new table while the driver is SIGKILLed between
//!   a batch's snapshot and its `commits/N` and at a random point, and an
//!   executor is SIGKILLed: the table's snapshots hold each batch once, in
//!   order;
//! - a query whose output does not fit an existing table, or that would
//!   change rows it appended, is refused at submit, naming the columns or
//!   the setting.

use std::path::Path;
use std::time::Duration;

use sluice_tests::lake::{oracle_rows, read_iceberg};
use sluice_tests::oracle::{expected_batches_with, rate_input, rate_start_ms};
use sluice_tests::{Cluster, QueryState, test_rng};

const TOTAL: u64 = 3000;
const RATE: u64 = 1000;
const SQL: &str = "SELECT value, value % 3 AS k, CAST(value * 7 AS VARCHAR) AS s, \
     timestamp_ms AS ts FROM input";

fn spec(name: &str, root: &Path, table: &str, sql: &str) -> String {
    format!(
        "name: {name}\n\
         source: {{rate: {{rows_per_second: {RATE}, partitions: 3, total_rows: {TOTAL}}}}}\n\
         trigger: {{interval_ms: 50}}\n\
         max_rows_per_batch: 150\n\
         sql: \"{sql}\"\n\
         sink: {{iceberg: {{catalog: {{sql: {{uri: 'sqlite://{}'}}}}, warehouse: {}, \
         namespace: lake, table: {table}}}}}\n",
        root.join("catalog.db").display(),
        root.join("warehouse").display(),
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
    let id = client
        .submit(&spec("ice", &root, "events", SQL))
        .await
        .expect("submit")
        .id;

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
    assert_eq!(
        read.snapshots.len(),
        batches.len(),
        "no snapshot of another writer"
    );
    eprintln!(
        "{} snapshots, {} data files, {} rows",
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
