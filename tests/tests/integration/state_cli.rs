//! `sluice state`, the real binary, reading a stateful query's state from
//! the checkpoint, its columns named as the query names its keys and
//! aggregates: its answer to SQL over the state agrees with the sink
//! (the latest row of each key up to the batch it read: how many keys,
//! and their counts' sum), while the query runs and once it is stopped.
//! An unknown operator, bad SQL and an unknown query are errors that name
//! them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sluice_tests::stateful::{batches, latest};
use sluice_tests::{CliOutput, Cluster, QueryState, Spec};

const QUERY: &str = "counts";
const SQL: &str =
    "SELECT value % 13 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 13";

/// Runs `sluice state` over the cluster's checkpoint (no driver dialled).
async fn state(cluster: &Cluster, args: &[&str]) -> CliOutput {
    let root = cluster.checkpoint_root();
    let mut all = vec!["state", "--checkpoint-root", root.to_str().unwrap()];
    all.extend(args);
    cluster.cli("127.0.0.1:1", &all).await
}

/// The batch `sluice state` read, from its note on stderr.
fn batch_read(out: &CliOutput) -> u64 {
    let (_, after) = out
        .stderr
        .split_once("at batch ")
        .unwrap_or_else(|| panic!("no batch named: {out}"));
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no batch: {out}"))
}

/// The keys and the sum of their counts that the sink's latest row of
/// each key says, over the batches up to `upto`.
async fn sink_totals(sink: &Path, upto: u64) -> (u64, u64) {
    let all = batches(sink).await;
    let upto: BTreeMap<u64, Vec<String>> = all.into_iter().filter(|(b, _)| *b <= upto).collect();
    let rows = latest(&upto, &["k"]);
    let count = |row: &String| -> u64 {
        let v: serde_json::Value = serde_json::from_str(row).unwrap();
        v["n"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .expect("a count")
    };
    (rows.len() as u64, rows.iter().map(count).sum())
}

/// `sluice state` with `sql`, as JSON: its one row, and the batch it read.
async fn answer(cluster: &Cluster, sql: &str) -> (serde_json::Value, u64) {
    let out = state(cluster, &[QUERY, "--json", "--sql", sql]).await;
    out.assert_success();
    let rows = out.json();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{out}");
    (rows[0].clone(), batch_read(&out))
}

/// The state's keys and counts' sum agree with the sink up to the batch
/// read; returns that batch.
async fn agrees(cluster: &Cluster, sink: &Path, count_column: &str) -> u64 {
    let sql = format!("SELECT count(*) AS keys, sum(\"{count_column}\") AS total FROM state");
    let (row, batch) = answer(cluster, &sql).await;
    let (keys, total) = sink_totals(sink, batch).await;
    assert!(total > 0, "rows counted by batch {batch}");
    assert_eq!(
        row["keys"].as_u64(),
        Some(keys),
        "keys at batch {batch}: {row}"
    );
    assert_eq!(
        row["total"].as_u64(),
        Some(total),
        "total at batch {batch}: {row}"
    );
    batch
}

/// The state's columns are the query's names: `sum(n)` over a
/// `count(*) AS n` state is every row the query read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_columns_are_named_as_the_query_names_them() {
    let cluster = Cluster::new("state-names");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let spec = Spec::new(QUERY, &cluster.sink_path(QUERY))
        .total_rows(600)
        .rows_per_second(3000)
        .sql("SELECT value % 5 AS k, count(*) AS n FROM input GROUP BY value % 5");
    client.submit(&spec.to_yaml()).await.expect("submits");
    client
        .wait_state(QUERY, QueryState::Finished, Duration::from_secs(60))
        .await;
    let (row, _) = answer(
        &cluster,
        "SELECT sum(n) AS total, count(k) AS keys FROM state",
    )
    .await;
    assert_eq!(row["total"].as_u64(), Some(600), "{row}");
    assert_eq!(row["keys"].as_u64(), Some(5), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_sql_agrees_with_the_sink_running_and_stopped() {
    let cluster = Cluster::new("state-cli");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path(QUERY);
    let spec = Spec::new(QUERY, &sink)
        .partitions(2)
        .rows_per_second(300)
        .interval_ms(200)
        .sql(SQL)
        .with("state_partitions: 3");
    client.submit(&spec.to_yaml()).await.expect("submits");
    client
        .wait_committed(QUERY, 3, Duration::from_secs(60))
        .await;

    // The state's columns: the key, then each aggregate's state, named as
    // the query (and so the sink) names them.
    let (row, _) = answer(&cluster, "SELECT * FROM state LIMIT 1").await;
    let columns: Vec<&String> = row.as_object().expect("a row").keys().collect();
    assert_eq!(columns, ["k", "n", "s"], "{row}");
    let count_column = "n";

    let running = agrees(&cluster, &sink, count_column).await;
    let status = client.get(QUERY).await.expect("status");
    assert_eq!(
        status.state,
        QueryState::Running as i32,
        "read while running"
    );

    client.stop(QUERY).await.expect("stops");
    client
        .wait_state(QUERY, QueryState::Stopped, Duration::from_secs(60))
        .await;
    let stopped = agrees(&cluster, &sink, count_column).await;
    assert!(stopped >= running, "{stopped} after {running}");

    // Errors name what is wrong.
    let out = state(
        &cluster,
        &[QUERY, "--operator", "nope", "--sql", "SELECT 1"],
    )
    .await;
    out.assert_failure();
    assert!(
        out.stderr.contains("no state operator \"nope\"") && out.stderr.contains("aggregate"),
        "{out}"
    );
    let out = state(&cluster, &[QUERY, "--sql", "SELECT nope FROM state"]).await;
    out.assert_failure();
    assert!(
        out.stderr.contains("--sql") && out.stderr.contains("nope"),
        "{out}"
    );
    let out = state(&cluster, &["missing", "--sql", "SELECT 1"]).await;
    out.assert_failure();
    assert!(
        out.stderr.contains("no query \"missing\"") && out.stderr.contains(QUERY),
        "{out}"
    );
}
