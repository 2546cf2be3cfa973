//! The SQL scenarios, each a query from submit to FINISHED on the
//! in-process cluster:
//!
//! - `sql-stateless`: the rate source (8 partitions) into
//!   `SELECT value, value % 1000 AS k FROM input WHERE value % 1000 < 900`,
//!   into jsonl and then into Parquet: Spark's `w1` workload;
//! - `files`: jsonl files (200 × 100 k rows), written before the clock
//!   starts, through a filter and a projection into Parquet.
//!
//! The sink check expects exactly the rows the filter keeps: every kept
//! `value` once, and no other.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, SinkFormat, cores, workdir};
use super::cluster::{self, Run};
use sluice_cli::stats::{Summary, round3};
use sluice_cli::verify;

/// Spark's `w1` query, over the rate source's `input`.
const STATELESS_SQL: &str = "SELECT value, value % 1000 AS k FROM input WHERE value % 1000 < 900";

/// The `files` query: keeps rows whose score is at least 10 (nine in ten).
const FILES_SQL: &str =
    "SELECT value, upper(city) AS city, score * 2 AS score2 FROM input WHERE score >= 10";

const CITIES: [&str; 5] = ["Lyon", "Oslo", "Kyiv", "Lima", "Pune"];

pub async fn stateless(
    args: &BenchArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Value, u8)> {
    let formats = match args.format {
        Some(f) => vec![f],
        None => vec![SinkFormat::Jsonl, SinkFormat::Parquet],
    };
    let partitions = args.partitions.unwrap_or(8);
    // Values below `rows` whose remainder by 1000 is below 900.
    let kept = args.rows / 1000 * 900 + (args.rows % 1000).min(900);
    let mut runs = serde_json::Map::new();
    let mut code = 0;
    for format in formats {
        let (_dir, root, out) = workdir()?;
        let mut q = cluster::unbounded_rate(
            format!("bench-sql-{}", format.as_str()),
            partitions,
            args.rows,
            args.max_rows_per_batch,
            &out,
        );
        q.sql = Some(STATELESS_SQL.into());
        q.format = format.as_str();
        let (c, client) = cluster::start(&root, shutdown).await?;
        let run = cluster::run_query(c, client, &q.name, &q.spec_text()).await?;
        let (check, exact) = check(&out, args.rows, kept).await?;
        code = code.max(u8::from(!exact));
        let mut figures = rates(&run, args.rows);
        figures["output_rows"] = kept.into();
        figures["verify"] = check;
        runs.insert(format.as_str().into(), figures);
    }
    let figures = json!({
        "scenario": "sql-stateless",
        "cores": cores(),
        "sql": STATELESS_SQL,
        "rows": args.rows,
        "partitions": partitions,
        "max_rows_per_batch": args.max_rows_per_batch,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
        "formats": runs,
    });
    Ok((figures, code))
}

pub async fn files(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let (dir, root, out) = workdir()?;
    let input = dir.path().join("in");
    let (bytes, kept) = write_inputs(&input, args.files, args.rows_per_file)?;
    let rows = args.files * args.rows_per_file;
    let spec = json!({
        "name": "bench-files",
        "source": {"files": {
            "path": input.to_str().context("temp path is not UTF-8")?,
            "format": "jsonl",
            "schema": [
                {"name": "value", "type": "bigint"},
                {"name": "city", "type": "string"},
                {"name": "score", "type": "double"},
                {"name": "tags", "type": "string"},
            ],
            "total_files": args.files,
        }},
        "trigger": {"interval_ms": 0},
        "sql": FILES_SQL,
        "sink": {"files": {"path": out, "format": "parquet"}},
    });
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, "bench-files", &spec.to_string()).await?;
    let (check, exact) = check(&out, rows, kept).await?;
    let mut figures = json!({
        "scenario": "files",
        "cores": cores(),
        "sql": FILES_SQL,
        "files": args.files,
        "rows_per_file": args.rows_per_file,
        "input_format": "jsonl",
        "sink_format": "parquet",
        "input_bytes": bytes,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
        "output_rows": kept,
        "mb_per_second": round3(bytes as f64 / 1e6 / run.seconds),
    });
    let rates = rates(&run, rows);
    for (k, v) in rates.as_object().into_iter().flatten() {
        figures[k] = v.clone();
    }
    figures["verify"] = check;
    Ok((figures, u8::from(!exact)))
}

/// A run's rates: input rows per second from submit to FINISHED, and the
/// median of the batches' own processed rows per second (Spark's
/// `processedRowsPerSecond`: a batch's input rows over its duration).
pub fn rates(run: &Run, rows: u64) -> Value {
    let processed: Vec<f64> = run
        .batches
        .values()
        .map(|p| p.processed_rows_per_second)
        .collect();
    let batch_ms: Vec<f64> = run
        .batches
        .values()
        .map(|p| p.duration_ms.unwrap_or_default().total as f64)
        .collect();
    json!({
        "rows": rows,
        "batches": run.status.last_committed_batch + 1,
        "seconds": round3(run.seconds),
        "rows_per_second": (rows as f64 / run.seconds).round(),
        "processed_rows_per_second": Summary::of(&processed).map_or(Value::Null, |s| s.to_json()),
        "batch_ms": Summary::of(&batch_ms).map_or(Value::Null, |s| s.to_json()),
    })
}

/// Checks the sink: exactly `kept` distinct values below `total`, each
/// once. Returns the checker's report with `exact` set by that rule.
pub(super) async fn check(out: &str, total: u64, kept: u64) -> anyhow::Result<(Value, bool)> {
    let report = verify::check(out, Some(total)).await?;
    let exact = report.duplicated == 0
        && report.unexpected == 0
        && report.rows == kept
        && report.distinct == kept
        && report.contiguous_batches;
    let mut v = verify::report_json(&report);
    v["expected_rows"] = kept.into();
    v["exact"] = exact.into();
    Ok((v, exact))
}

/// Writes `files` jsonl files of `rows` rows each into `dir` (values
/// 0..files × rows); returns their total bytes and how many rows the
/// `files` query keeps.
fn write_inputs(dir: &Path, files: u64, rows: u64) -> anyhow::Result<(u64, u64)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (mut bytes, mut kept) = (0u64, 0u64);
    for f in 0..files {
        let path = dir.join(format!("input-{f:05}.jsonl"));
        let file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        for value in f * rows..(f + 1) * rows {
            let score = (value * 7919 % 1000) as f64 / 10.0;
            kept += u64::from(score >= 10.0);
            let city = CITIES[(value % 5) as usize];
            writeln!(
                w,
                r#"{{"value":{value},"city":"{city}","score":{score:.1},"tags":"t{},t{}"}}"#,
                value % 3,
                value % 11
            )?;
        }
        w.flush()?;
        bytes += std::fs::metadata(&path)?.len();
    }
    Ok((bytes, kept))
}
