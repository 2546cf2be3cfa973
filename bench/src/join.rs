//! The `join` scenario: two rate streams, `a` and `b`, joined on their
//! value within a 10-second event-time bound (`b`'s time within 5 s of
//! `a`'s either way), with a watermark on each (`--watermark-ms`), into
//! Parquet, from submit to FINISHED on the in-process cluster. To compare
//! with Spark joining two rate streams with watermarks and the same bound
//! (`scripts/spark/join.py`).
//!
//! Each stream has `--rows` rows spread over 30 s of event time, so rows
//! leave the state while it runs. Every row of `a` has exactly one match,
//! its value's row of `b`: the sink check reads every committed row and
//! wants each value below `--rows` exactly once. It reports the rates of
//! `sql-stateless` (a batch's input rows are both streams'), the state's
//! rows (at the end and at their peak) and the stage times.

use serde_json::{Value, json};
use sluice_common::spec::DEFAULT_STATE_PARTITIONS;
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, cores, workdir};
use super::cluster;
use super::sql::{check, rates};

/// The event time that each stream's rows span.
const EVENT_SECONDS: u64 = 30;

pub const JOIN_SQL: &str = "SELECT a.value, a.timestamp_ms AS a_ts, b.timestamp_ms AS b_ts \
     FROM a JOIN b ON a.value = b.value \
     AND b.timestamp_ms BETWEEN a.timestamp_ms - INTERVAL '5 seconds' \
     AND a.timestamp_ms + INTERVAL '5 seconds'";

/// The spec of the join over `rows` rows a stream into `out`.
fn spec(name: &str, args: &BenchArgs, partitions: u32, out: &str) -> Value {
    let rate = json!({"rate": {
        "partitions": partitions,
        "rows_per_second": (args.rows / EVENT_SECONDS).max(1),
        "total_rows": args.rows,
    }});
    let watermark = json!({"column": "timestamp_ms", "delay_ms": args.watermark_ms});
    json!({
        "name": name,
        "sources": {"a": rate, "b": rate},
        "watermarks": {"a": watermark, "b": watermark},
        "trigger": {"interval_ms": 0},
        "max_rows_per_batch": args.max_rows_per_batch,
        "sink": {"files": {"path": out, "format": "parquet"}},
        "sql": JOIN_SQL,
    })
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let (_dir, root, out) = workdir()?;
    let partitions = args.partitions.unwrap_or(2);
    let name = "bench-join";
    let spec = spec(name, args, partitions, &out).to_string();
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, name, &spec).await?;
    let (verify, exact) = check(&out, args.rows, args.rows).await?;
    let mut figures = json!({
        "scenario": "join",
        "cores": cores(),
        "sql": JOIN_SQL,
        "streams": 2,
        "partitions": partitions,
        "rows_per_stream": args.rows,
        "rows_per_second_per_stream": (args.rows / EVENT_SECONDS).max(1),
        "event_seconds": EVENT_SECONDS,
        "watermark_delay_ms": args.watermark_ms,
        "bound_ms": 10_000,
        "format": "parquet",
        "state_partitions": DEFAULT_STATE_PARTITIONS,
        "max_rows_per_batch": args.max_rows_per_batch,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
    });
    super::stateful::extend(&mut figures, rates(&run, 2 * args.rows));
    super::stateful::extend(&mut figures, super::stateful::state(&run));
    figures["verify"] = verify;
    Ok((figures, u8::from(!exact)))
}
