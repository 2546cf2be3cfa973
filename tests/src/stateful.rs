//! Checks of a stateful query's sink against the one-piece oracle, by
//! output mode (Spark's semantics):
//!
//! - update: each batch emits the groups it changed; the latest emitted
//!   row of each group is the group's final row.
//! - complete: the last batch emits the whole result.
//! - a `SELECT DISTINCT` in update mode: each key is emitted once, ever.

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::RecordBatch;

use crate::oracle::{committed_batches, expected_with, normalized};

/// What each committed batch wrote, normalized, by batch id.
pub async fn batches(sink: &Path) -> BTreeMap<u64, Vec<String>> {
    let any = std::sync::Arc::new(arrow_schema::Schema::empty());
    committed_batches(sink, &any).await
}

/// The key of a normalized row: the values of `keys`, joined.
pub fn key_of(row: &str, keys: &[&str]) -> String {
    let v: serde_json::Value = serde_json::from_str(row).expect("a JSON row");
    keys.iter()
        .map(|k| v.get(*k).map_or("null".to_string(), |x| x.to_string()))
        .collect::<Vec<_>>()
        .join("|")
}

/// The latest row of each key over the batches, in batch order; a batch
/// that emits one key twice fails the test.
pub fn latest(batches: &BTreeMap<u64, Vec<String>>, keys: &[&str]) -> Vec<String> {
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for (id, rows) in batches {
        let mut seen = std::collections::BTreeSet::new();
        for r in rows {
            let k = key_of(r, keys);
            assert!(seen.insert(k.clone()), "batch {id} emits key {k} twice");
            last.insert(k, r.clone());
        }
    }
    let mut out: Vec<String> = last.into_values().collect();
    out.sort();
    out
}

/// The oracle's rows, normalized like the sink's.
pub async fn oracle(
    sql: &str,
    input: Vec<RecordBatch>,
    tables: &[(&str, RecordBatch)],
) -> Vec<String> {
    normalized(&expected_with(sql, input, tables).await)
}

/// The sink of a query in `mode` holds the oracle's result: the latest
/// row of each key (update), or the last batch (complete). A DISTINCT in
/// update mode emits every key once over all batches.
pub fn assert_matches(
    name: &str,
    mode: &str,
    batches: &BTreeMap<u64, Vec<String>>,
    keys: &[&str],
    want: &[String],
) {
    assert!(!want.is_empty(), "{name}: the oracle has rows");
    let got: Vec<String> = match mode {
        "update" => latest(batches, keys),
        "complete" => batches.values().last().cloned().unwrap_or_default(),
        "distinct" => {
            let mut all: Vec<String> = batches.values().flatten().cloned().collect();
            all.sort();
            all
        }
        other => panic!("no such mode {other}"),
    };
    assert_eq!(
        got.len(),
        want.len(),
        "{name}: row counts differ\n got {got:?}\nwant {want:?}"
    );
    assert!(
        got == want,
        "{name}: the sink differs from the oracle\n got {got:?}\nwant {want:?}"
    );
}

/// The end of a normalized row's window `w` (a `{start, end}` struct), in
/// milliseconds since the epoch.
pub fn window_end(row: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(row).expect("a JSON row");
    let w: serde_json::Value =
        serde_json::from_str(v["w"].as_str().expect("a window")).expect("a window object");
    match &w["end"] {
        serde_json::Value::Number(n) => n.as_i64().expect("milliseconds"),
        other => epoch_ms(other.as_str().expect("a window end")),
    }
}

/// Milliseconds since the epoch of a UTC timestamp as the jsonl sink
/// writes it (`2023-11-14T22:13:20.5`).
fn epoch_ms(s: &str) -> i64 {
    let (date, time) = s.split_once('T').expect("a timestamp");
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().expect("a date"))
        .collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().expect("a time")).collect();
    let ms: i64 = format!("{frac:0<3}")[..3].parse().expect("milliseconds");
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    ((days * 24 + t[0]) * 60 + t[1]) * 60_000 + t[2] * 1000 + ms
}

/// A finished append-mode query over the rate source: each window (with
/// `keys`) is emitted once, in a batch whose watermark had passed its end,
/// and every window of the oracle is there: the batch that ends the input
/// runs with the watermark at the end of time. `oracle_sql` computes the
/// windows without Sluice's `window()`.
pub async fn assert_append(
    root: &Path,
    name: &str,
    sink: &Path,
    oracle_sql: &str,
    (rows_per_second, total): (u64, u64),
    keys: &[&str],
) {
    let watermarks: BTreeMap<u64, Option<i64>> = crate::offset_records(root, name)
        .iter()
        .map(|o| (o.batch_id, o.watermark_ms))
        .collect();
    let last = watermarks
        .values()
        .last()
        .copied()
        .flatten()
        .expect("a watermark");
    let got = batches(sink).await;
    let mut emitted = std::collections::BTreeSet::new();
    for (batch, rows) in got.iter().filter(|(_, rows)| !rows.is_empty()) {
        let wm = watermarks[batch].expect("append emits only behind a watermark");
        for r in rows {
            assert!(
                window_end(r) <= wm,
                "{name}: batch {batch} emits {r} before the watermark {wm} passes its end"
            );
            assert!(
                emitted.insert(key_of(r, keys)),
                "{name}: {r} is emitted twice"
            );
        }
    }
    let start = crate::oracle::rate_start_ms(root, name);
    let input = crate::oracle::rate_input(start, rows_per_second, total);
    assert_eq!(last, i64::MAX, "{name}: the last batch ends the input");
    let want = oracle(oracle_sql, input, &[]).await;
    assert_matches(name, "distinct", &got, keys, &want);
}

/// An update-mode query over the rate source: the latest row of each key
/// is the oracle's row.
pub async fn assert_update(
    root: &Path,
    name: &str,
    sink: &Path,
    sql: &str,
    (rows_per_second, total): (u64, u64),
    keys: &[&str],
) {
    let start = crate::oracle::rate_start_ms(root, name);
    let input = crate::oracle::rate_input(start, rows_per_second, total);
    let want = oracle(sql, input, &[]).await;
    assert_matches(name, "update", &batches(sink).await, keys, &want);
}

/// A stateful query over the rate source with event time: 4 partitions,
/// `(rows_per_second, total)` rows in batches of at most 4000 at trigger
/// 0, a 200 ms watermark on `timestamp_ms`, 4 state partitions, and the
/// top-level `extra` lines (`output_mode: append`, ...).
pub fn rate_spec(name: &str, sink: &Path, rate: (u64, u64), sql: &str, extra: &[&str]) -> String {
    let mut spec = crate::Spec::new(name, sink)
        .partitions(4)
        .rows_per_second(rate.0)
        .total_rows(rate.1)
        .max_rows_per_batch(4000)
        .interval_ms(0)
        .sql(sql)
        .with("watermark: {column: timestamp_ms, delay_ms: 200}")
        .with("state_partitions: 4");
    for line in extra {
        spec = spec.with(line);
    }
    spec.to_yaml()
}

/// The running aggregate of the chaos and failover tests (update mode).
pub const COUNTS: &str = "SELECT value % 500 AS k, count(*) AS n, sum(value) AS s, max(value) AS hi FROM input GROUP BY value % 500";
/// Their windows (append mode), and the same without `window()`.
pub const WINDOWS: &str = "SELECT window(timestamp_ms, '500 milliseconds') AS w, value % 20 AS k, count(*) AS n FROM input GROUP BY window(timestamp_ms, '500 milliseconds'), value % 20";
pub const WINDOWS_ORACLE: &str = "SELECT named_struct('start', date_bin(INTERVAL '500 milliseconds', timestamp_ms), 'end', date_bin(INTERVAL '500 milliseconds', timestamp_ms) + INTERVAL '500 milliseconds') AS w, value % 20 AS k, count(*) AS n FROM input GROUP BY 1, 2";

/// Submits [`COUNTS`] as `counts` (update mode) and [`WINDOWS`] as
/// `windows` (append mode), over `rate` with a snapshot every
/// `snapshot_interval` batches.
pub async fn submit_pair(
    client: &mut crate::Client,
    cluster: &crate::Cluster,
    rate: (u64, u64),
    snapshot_interval: u64,
) {
    let snapshots = format!("snapshot_interval: {snapshot_interval}");
    for (name, sql, mode) in [
        ("counts", COUNTS, "output_mode: update"),
        ("windows", WINDOWS, "output_mode: append"),
    ] {
        let spec = rate_spec(
            name,
            &cluster.sink_path(name),
            rate,
            sql,
            &[mode, &snapshots],
        );
        client.submit(&spec).await.expect("submit");
    }
}

/// Both queries of [`submit_pair`] finished, with commit epochs that never
/// decrease, and their sinks hold the oracle's result. Returns each
/// query's commit epochs.
pub async fn assert_pair(
    client: &mut crate::Client,
    cluster: &crate::Cluster,
    rate: (u64, u64),
) -> Vec<Vec<(u64, u64)>> {
    let root = cluster.checkpoint_root();
    let mut epochs = Vec::new();
    for name in ["counts", "windows"] {
        let status = client
            .wait_state(
                name,
                crate::QueryState::Finished,
                std::time::Duration::from_secs(120),
            )
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        epochs.push(crate::assert_epochs_non_decreasing(&root, name));
    }
    let sink = cluster.sink_path("counts");
    assert_update(&root, "counts", &sink, COUNTS, rate, &["k"]).await;
    let sink = cluster.sink_path("windows");
    assert_append(&root, "windows", &sink, WINDOWS_ORACLE, rate, &["w", "k"]).await;
    epochs
}
