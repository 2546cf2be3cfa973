//! The stateful scenarios: a GROUP BY over the rate source (8 partitions)
//! into jsonl, each a query from submit to FINISHED on the in-process
//! cluster:
//!
//! - `stateful`: `SELECT value % 1000 AS k, count(*) AS n, sum(value) AS s
//!   FROM input GROUP BY value % 1000` over every row at once, in update
//!   mode: to compare with Spark's `w2` workload
//!   (`groupBy(value % 1000).count()`);
//! - `windowed`: a count per tumbling window of event time (`--window-ms`)
//!   and key (`--keys`), in append mode with a watermark (`--watermark-ms`),
//!   over a rate source whose `--rows` span 30 s of event time, so that
//!   windows close while it runs.
//!
//! Both report the rates of `sql-stateless`, the state's rows (at the end
//! and at their peak) and the median map and reduce stage times. The sink
//! checks read every committed row: in `stateful`, the last row of each
//! key (by batch) holds the exact count and sum of its values; in
//! `windowed`, each (window, key) is emitted once with its exact count, no
//! window before the watermark passed its end, and every window the last
//! watermark passed in full (see `state_check.rs`). `state-recovery` is
//! in `state_recovery.rs`.

use serde_json::{Value, json};
use sluice_common::checkpoint::{Checkpoint, RateSourceMeta, Record};
use sluice_common::spec::DEFAULT_STATE_PARTITIONS;
use sluice_common::storage::Stores;
use sluice_proto::Durations;
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, cores, workdir};
use super::cluster::{self, Run};
use super::sql::rates;
use super::state_check::{Windows, check_latest, count_below};
use sluice_cli::queries::RateQuery;
use sluice_cli::stats::Summary;

const STATEFUL_SQL: &str =
    "SELECT value % 1000 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 1000";
/// The keys of [`STATEFUL_SQL`].
const STATEFUL_KEYS: u64 = 1000;
/// The event time that the `windowed` scenario's rows span.
const EVENT_SECONDS: u64 = 30;

pub async fn stateful(
    args: &BenchArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Value, u8)> {
    let (_dir, root, out) = workdir()?;
    let partitions = args.partitions.unwrap_or(8);
    let mut q = cluster::unbounded_rate(
        "bench-stateful".into(),
        partitions,
        args.rows,
        args.max_rows_per_batch,
        &out,
    );
    q.sql = Some(STATEFUL_SQL.into());
    let spec = q.spec_text_with(json!({ "output_mode": "update" }));
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, &q.name, &spec).await?;
    let rows = args.rows;
    let (check, exact) = check_latest(&out, STATEFUL_KEYS, &["n", "s"], |k| {
        // The values k, k + 1000, ..., k + 1000 (n - 1).
        let n = i128::from(count_below(rows, STATEFUL_KEYS, k));
        vec![n, n * i128::from(k) + 1000 * n * (n - 1) / 2]
    })
    .await?;
    let mut figures = json!({
        "scenario": "stateful",
        "cores": cores(),
        "sql": STATEFUL_SQL,
        "keys": STATEFUL_KEYS,
        "output_mode": "update",
        "partitions": partitions,
        "state_partitions": DEFAULT_STATE_PARTITIONS,
        "max_rows_per_batch": args.max_rows_per_batch,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
    });
    extend(&mut figures, rates(&run, rows));
    extend(&mut figures, state(&run));
    figures["verify"] = check;
    Ok((figures, u8::from(!exact)))
}

pub async fn windowed(
    args: &BenchArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Value, u8)> {
    let keys = args.keys.unwrap_or(100_000);
    anyhow::ensure!(
        keys > 0 && args.window_ms > 0,
        "--keys and --window-ms must be above 0"
    );
    let (_dir, root, out) = workdir()?;
    let partitions = args.partitions.unwrap_or(8);
    let rows_per_second = (args.rows / EVENT_SECONDS).max(1);
    let sql = windowed_sql(args.window_ms, keys);
    let q = RateQuery {
        name: "bench-windowed".into(),
        partitions,
        rows_per_second,
        total_rows: Some(args.rows),
        trigger_ms: 0,
        max_rows_per_batch: Some(args.max_rows_per_batch),
        sink: out.clone(),
        sql: Some(sql.clone()),
        format: "jsonl",
    };
    let spec = q.spec_text_with(json!({
        "output_mode": "append",
        "watermark": {"column": "timestamp_ms", "delay_ms": args.watermark_ms},
    }));
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, &q.name, &spec).await?;
    let windows = Windows {
        start_ms: rate_start_ms(&root, &q.name).await?,
        rows_per_second,
        rows: args.rows,
        keys,
        size_ms: i64::try_from(args.window_ms)?,
    };
    // The last batch's reduce tasks emitted every window it passed.
    let watermark = run
        .batches
        .values()
        .next_back()
        .and_then(|p| p.watermark_ms);
    let (check, exact) = windows.check(&out, watermark).await?;
    let mut figures = json!({
        "scenario": "windowed",
        "cores": cores(),
        "sql": sql,
        "keys": keys,
        "window_ms": args.window_ms,
        "watermark_delay_ms": args.watermark_ms,
        "output_mode": "append",
        "partitions": partitions,
        "rows_per_second_source": rows_per_second,
        "event_seconds": EVENT_SECONDS,
        "state_partitions": DEFAULT_STATE_PARTITIONS,
        "max_rows_per_batch": args.max_rows_per_batch,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
    });
    extend(&mut figures, rates(&run, args.rows));
    extend(&mut figures, state(&run));
    figures["windows_emitted"] = check["windows_emitted"].clone();
    figures["final_watermark_ms"] = watermark.into();
    figures["rows_dropped_by_watermark"] = run
        .batches
        .values()
        .map(|p| p.rows_dropped_by_watermark)
        .sum::<u64>()
        .into();
    figures["verify"] = check;
    Ok((figures, u8::from(!exact)))
}

/// The `windowed` query: `window_ms` given in seconds when it is whole.
fn windowed_sql(window_ms: u64, keys: u64) -> String {
    let size = if window_ms.is_multiple_of(1000) {
        format!("{} seconds", window_ms / 1000)
    } else {
        format!("{window_ms} milliseconds")
    };
    let w = format!("window(timestamp_ms, '{size}')");
    format!(
        "SELECT {w} AS w, value % {keys} AS k, count(*) AS n FROM input GROUP BY {w}, value % {keys}"
    )
}

/// The state's rows after the last batch and at their peak, and the map
/// and reduce stage times of the batches.
pub(super) fn state(run: &Run) -> Value {
    let last = run.batches.values().next_back();
    let stage = |f: fn(&Durations) -> u64| -> Value {
        let v: Vec<f64> = run
            .batches
            .values()
            .map(|p| f(&p.duration_ms.unwrap_or_default()) as f64)
            .collect();
        Summary::of(&v).map_or(Value::Null, |s| s.to_json())
    };
    let (map, reduce) = (stage(|d| d.map), stage(|d| d.reduce));
    json!({
        "state_rows": last.map(|p| p.state_rows_total),
        "state_bytes": last.map(|p| p.state_bytes),
        "peak_state_rows": run.batches.values().map(|p| p.state_rows_total).max(),
        "map_median_ms": map["median"],
        "reduce_median_ms": reduce["median"],
        "map_ms": map,
        "reduce_ms": reduce,
    })
}

/// Sets every field of `more` (an object) in `figures`.
pub(super) fn extend(figures: &mut Value, more: Value) {
    if let (Some(f), Value::Object(more)) = (figures.as_object_mut(), more) {
        f.extend(more);
    }
}

/// The rate source's start time, from the checkpoint of `query` under `root`.
pub async fn rate_start_ms(root: &str, query: &str) -> anyhow::Result<i64> {
    let qc = Checkpoint::open(&Stores::default(), root)?.query(query);
    let meta: RateSourceMeta = qc.require(Record::RateStart).await?;
    Ok(meta.start_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windowed_queries_name_their_window() {
        let sql = windowed_sql(10_000, 100_000);
        assert!(
            sql.contains("window(timestamp_ms, '10 seconds') AS w"),
            "{sql}"
        );
        assert!(sql.ends_with("GROUP BY window(timestamp_ms, '10 seconds'), value % 100000"));
        assert!(windowed_sql(1500, 10).contains("'1500 milliseconds'"));
    }
}
