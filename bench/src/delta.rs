//! `sluice-bench delta`: the rate source into a Delta table against the
//! same rows into the Parquet file sink, by turns on fresh clusters; and
//! the data files a table keeps per hour at a 1 s trigger, without and
//! with compaction.
//!
//! A batch's files do not depend on its trigger (each task writes one
//! file of its rows), so the file counts come from `--batches` batches at
//! trigger 0 with a second's rows each: an hour of a 1 s trigger is 3600
//! of them, and the counts are scaled to that.

use std::collections::HashSet;

use serde_json::{Value, json};
use sluice_cli::queries::RateQuery;
use sluice_cli::stats::round3;
use sluice_cli::verify;
use sluice_common::sink::delta_compact::changes_of;
use sluice_common::sink::delta_log::{read_commit, versions};
use tokio_util::sync::CancellationToken;

use crate::args::{BenchArgs, cores, workdir};
use crate::cluster;

/// Batches of a 1 s trigger in an hour.
const BATCHES_PER_HOUR: u64 = 3600;
/// The rows of one batch in the file count runs.
const ROWS_PER_BATCH: u64 = 1000;
/// `compact.every_batches` of the file count run with compaction.
const COMPACT_EVERY: u64 = 100;

/// What a Delta table holds, read from its log.
#[derive(Debug, Default)]
struct Table {
    rows: u64,
    live_files: u64,
    added_files: u64,
    compactions: u64,
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let partitions = args.partitions.unwrap_or(4);
    let mut best = [0.0f64; 2];
    let mut exact = true;
    for turn in 0..2 {
        for (i, delta) in [false, true].into_iter().enumerate() {
            let name = format!("bench-delta-{turn}-{i}");
            let q = rate(name, partitions, args.rows, args.max_rows_per_batch);
            let (seconds, rows) = run_once(&q, delta, None, shutdown).await?;
            exact &= rows == args.rows;
            best[i] = best[i].max(args.rows as f64 / seconds);
        }
    }
    let batches = args.batches.unwrap_or(420);
    let mut counts = Vec::new();
    for compact in [None, Some(COMPACT_EVERY)] {
        let name = format!("bench-delta-files-{}", compact.is_some());
        let q = rate(name, partitions, batches * ROWS_PER_BATCH, ROWS_PER_BATCH);
        let (_, table) = run_delta(&q, compact, shutdown).await?;
        exact &= table.rows == batches * ROWS_PER_BATCH;
        counts.push(json!({
            "compact_every_batches": compact,
            "batches": batches,
            "files_written": table.added_files,
            "files_in_table": table.live_files,
            "compactions": table.compactions,
            "files_per_hour_at_1s": table.live_files * BATCHES_PER_HOUR / batches,
        }));
    }
    let figures = json!({
        "scenario": "delta",
        "cores": cores(),
        "rows": args.rows,
        "partitions": partitions,
        "max_rows_per_batch": args.max_rows_per_batch,
        "parquet_file_sink_rows_per_second": best[0].round(),
        "delta_rows_per_second": best[1].round(),
        "delta_over_parquet": round3(best[1] / best[0]),
        "file_counts": counts,
        "exact": exact,
    });
    Ok((figures, u8::from(!exact)))
}

/// `rows` rows of the rate source, all available at once, in batches of
/// at most `per_batch`, into Parquet (or a table).
pub(crate) fn rate(name: String, partitions: u32, rows: u64, per_batch: u64) -> RateQuery {
    let mut q = cluster::unbounded_rate(name, partitions, rows, per_batch, "");
    q.format = "parquet";
    q
}

/// One run on a fresh cluster: its seconds from submit to the end, and
/// the rows its sink holds.
async fn run_once(
    q: &RateQuery,
    delta: bool,
    compact: Option<u64>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(f64, u64)> {
    if delta {
        let (seconds, table) = run_delta(q, compact, shutdown).await?;
        return Ok((seconds, table.rows));
    }
    run_parquet(q, shutdown).await
}

/// One run of `q` into the Parquet file sink on a fresh cluster: its
/// seconds from submit to the end, and the rows its sink holds (checked).
pub(crate) async fn run_parquet(
    q: &RateQuery,
    shutdown: &CancellationToken,
) -> anyhow::Result<(f64, u64)> {
    let (_dir, root, out) = workdir()?;
    let mut q = q.clone();
    q.sink = out.clone();
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, &q.name, &q.spec_text()).await?;
    let total = q.total_rows.unwrap_or(0);
    let report = verify::check_with(&verify::stores(), &out, Some(total)).await?;
    let rows = if verify::exit_code(&report) == 0 {
        total
    } else {
        0
    };
    Ok((run.seconds, rows))
}

async fn run_delta(
    q: &RateQuery,
    compact: Option<u64>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(f64, Table)> {
    let (_dir, root, out) = workdir()?;
    let mut sink = json!({"path": out});
    if let Some(every) = compact {
        sink["compact"] = json!({"every_batches": every});
    }
    let spec = q.spec_text_with(json!({"sink": {"delta": sink}}));
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, &q.name, &spec).await?;
    // A compaction after the last batch may still run: the table is read
    // as the cluster left it.
    Ok((run.seconds, table(&out).await?))
}

/// The table at `path`, from its log: its live files and their rows.
async fn table(path: &str) -> anyhow::Result<Table> {
    let storage = verify::stores().open(path)?;
    let mut live = std::collections::HashMap::new();
    let mut out = Table::default();
    for version in versions(&storage).await? {
        let (bytes, what) = read_commit(&storage, version).await?;
        let changes = changes_of(&bytes, &what)?;
        if changes.compacted_by.is_some() {
            out.compactions += 1;
        } else {
            out.added_files += changes.added.len() as u64;
        }
        let removed: HashSet<String> = changes.removed.into_iter().collect();
        live.retain(|p: &String, _| !removed.contains(p));
        live.extend(changes.added.into_iter().map(|f| (f.path, f.num_records)));
    }
    out.live_files = live.len() as u64;
    out.rows = live.values().sum();
    Ok(out)
}
