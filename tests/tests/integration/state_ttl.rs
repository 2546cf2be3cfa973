//! `state_ttl_ms` through a real cluster: an aggregation without a window
//! and without a watermark (processing time) forgets the keys no batch
//! updated for the TTL. The batch that expires them counts them in its
//! progress, `sluice state` no longer shows them, and a key that comes
//! back starts fresh, in the state and in the sink. A spec whose only
//! operator is a windowed aggregation is refused at submit, naming the
//! field.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use sluice_common::checkpoint::{Log, ProgressRecord};
use sluice_tests::stateful::{batches, latest};
use sluice_tests::{Cluster, Spec, inputs, log_records};
use tonic::Code;

const QUERY: &str = "ttl";
const TTL_MS: u64 = 1500;
const WAIT: Duration = Duration::from_secs(60);

/// A file of one column, `k`, one row per key given.
fn keys(dir: &Path, n: u64, keys: &[&str]) {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
    let column = StringArray::from(keys.to_vec());
    let batch = RecordBatch::try_new(schema, vec![Arc::new(column)]).expect("rows of k");
    inputs::write(dir, &format!("{n:02}.jsonl"), "jsonl", &batch);
}

fn spec(dir: &Path, sink: &Path) -> String {
    format!(
        "name: {QUERY}\nsource:\n  files:\n    path: {}\n    format: jsonl\n    schema:\n      - {{name: k, type: string}}\n    max_files_per_batch: 1\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: \"SELECT k, count(*) AS n FROM input GROUP BY k\"\nstate_partitions: 2\nstate_ttl_ms: {TTL_MS}\n",
        dir.display(),
        sink.display()
    )
}

/// Each key in the state with its count, as `sluice state` reads it from
/// the checkpoint; every row has the operator's columns only (the key and
/// the count's state), no stamp.
async fn state(cluster: &Cluster) -> Vec<(String, u64)> {
    let root = cluster.checkpoint_root();
    let args = [
        "state",
        "--checkpoint-root",
        root.to_str().unwrap(),
        QUERY,
        "--json",
        "--sql",
        "SELECT * FROM state ORDER BY k",
    ];
    let out = cluster.cli("127.0.0.1:1", &args).await;
    out.assert_success();
    let rows = out.json();
    let rows = rows.as_array().unwrap_or_else(|| panic!("rows: {out}"));
    rows.iter()
        .map(|row| {
            let row = row.as_object().expect("a row");
            assert_eq!(row.len(), 2, "the key and the count, no stamp: {out}");
            let k = row["k"].as_str().expect("a key").to_string();
            (
                k,
                row["n"]
                    .as_u64()
                    .expect("a count, `n` as the query names it"),
            )
        })
        .collect()
}

/// The count in the sink's latest row of key `k`.
async fn sink_count(sink: &Path, k: &str) -> u64 {
    let rows = latest(&batches(sink).await, &["k"]);
    let row = rows
        .iter()
        .map(|r| serde_json::from_str::<serde_json::Value>(r).expect("a JSON row"))
        .find(|v| v["k"] == k)
        .unwrap_or_else(|| panic!("no row of {k} in {rows:?}"));
    row["n"]
        .as_str()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count: {row}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_expire_counted_and_come_back_fresh() {
    let cluster = Cluster::new("state-ttl");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let dir = cluster.root().join("input");
    std::fs::create_dir_all(&dir).unwrap();
    let sink = cluster.sink_path(QUERY);

    keys(&dir, 0, &["a", "b", "b", "b", "c", "c"]);
    let text = spec(&dir, &sink);
    client
        .submit(&text)
        .await
        .unwrap_or_else(|e| panic!("submit refused: {e}\n{text}"));
    client.wait_committed(QUERY, 0, WAIT).await;
    let counts = |c: &[(&str, u64)]| -> Vec<(String, u64)> {
        c.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    };
    assert_eq!(
        state(&cluster).await,
        counts(&[("a", 1), ("b", 3), ("c", 2)])
    );

    // Past the TTL, a batch of key a: b and c expire in it, a does not.
    tokio::time::sleep(Duration::from_millis(TTL_MS + 1000)).await;
    keys(&dir, 1, &["a", "a"]);
    client.wait_committed(QUERY, 1, WAIT).await;
    assert_eq!(state(&cluster).await, counts(&[("a", 3)]));
    let status = client
        .wait_for(QUERY, "reporting batch 1", WAIT, |s| {
            s.latest_progress.as_ref().is_some_and(|p| p.batch_id >= 1)
        })
        .await;
    let progress = status.latest_progress.expect("progress");
    assert_eq!(
        (
            progress.batch_id,
            progress.state_expired,
            progress.state_rows_total
        ),
        (1, 2, 1),
        "{progress:#?}"
    );
    let stored = log_records::<ProgressRecord>(&cluster.checkpoint_root(), QUERY, Log::Progress);
    let expired: Vec<(u64, u64)> = stored.iter().map(|(n, r)| (*n, r.state_expired)).collect();
    assert_eq!(&expired[..2], [(0, 0), (1, 2)], "progress/N records it");

    // Key b again: it starts fresh, in the state and in the sink.
    keys(&dir, 2, &["b", "b"]);
    client.wait_committed(QUERY, 2, WAIT).await;
    let now = state(&cluster).await;
    assert!(
        now.contains(&("b".to_string(), 2)),
        "b counted afresh: {now:?}"
    );
    assert_eq!(
        sink_count(&sink, "b").await,
        2,
        "the sink's latest row of b"
    );
    assert_eq!(
        sink_count(&sink, "c").await,
        2,
        "c's last row stays in the sink"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_without_an_operator_it_applies_to_is_refused_naming_it() {
    let cluster = Cluster::new("state-ttl-refused");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let mut client = cluster.client(&drivers);
    let windowed = "SELECT window(timestamp_ms, '1 second') AS w, count(*) AS n \
                    FROM input GROUP BY window(timestamp_ms, '1 second')";
    let spec = Spec::new("ttl-windowed", &cluster.sink_path("ttl-windowed"))
        .sql(windowed)
        .with("watermark: {column: timestamp_ms, delay_ms: 500}")
        .with("state_ttl_ms: 60000");
    let err = client
        .submit(&spec.to_yaml())
        .await
        .expect_err("a ttl that applies to nothing");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("state_ttl_ms") && err.message().contains("without a window"),
        "{err:?}"
    );
    // The same query without it runs.
    let plain = Spec::new("ttl-plain", &cluster.sink_path("ttl-plain"))
        .sql(windowed)
        .with("watermark: {column: timestamp_ms, delay_ms: 500}");
    client.submit(&plain.to_yaml()).await.expect("submits");
}
