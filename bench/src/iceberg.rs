//! `sluice-bench iceberg`: the rate source into an Iceberg table (its SQL
//! catalog in a SQLite file) against the same rows into the Parquet file
//! sink, by turns on fresh clusters; and the data files a table keeps per
//! hour at a 1 s trigger, without and with compaction, counted as in
//! `delta.rs` from `--batches` batches of a second's rows each.

use serde_json::{Value, json};
use sluice_cli::queries::RateQuery;
use sluice_cli::stats::round3;
use sluice_cli::verify;
use sluice_common::sink::iceberg::catalog::SqlTable;
use sluice_common::sink::iceberg::manifest::{
    Status, manifest_of, read_manifest, read_manifest_list,
};
use sluice_common::sink::iceberg::metadata::{COMPACTED_BY_KEY, TableMetadata};
use sluice_common::storage::{Path, Stores};
use tokio_util::sync::CancellationToken;

use crate::args::{BenchArgs, cores, workdir};
use crate::cluster;
use crate::delta::{rate, run_parquet};

/// Batches of a 1 s trigger in an hour.
const BATCHES_PER_HOUR: u64 = 3600;
/// The rows of one batch in the file count runs.
const ROWS_PER_BATCH: u64 = 1000;
/// `compact.every_batches` of the file count run with compaction.
const COMPACT_EVERY: u64 = 100;

/// What an Iceberg table's current snapshot holds.
#[derive(Debug, Default)]
struct Table {
    rows: u64,
    live_files: u64,
    /// The files the query's batches appended, in all.
    added_files: u64,
    compactions: u64,
    manifests: u64,
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let partitions = args.partitions.unwrap_or(4);
    let mut best = [0.0f64; 2];
    let mut exact = true;
    for turn in 0..2 {
        for (i, iceberg) in [false, true].into_iter().enumerate() {
            let name = format!("bench-iceberg-{turn}-{i}");
            let q = rate(name, partitions, args.rows, args.max_rows_per_batch);
            let (seconds, rows) = match iceberg {
                true => run_iceberg(&q, None, shutdown)
                    .await
                    .map(|(s, t)| (s, t.rows))?,
                false => run_parquet(&q, shutdown).await?,
            };
            exact &= rows == args.rows;
            best[i] = best[i].max(args.rows as f64 / seconds);
        }
    }
    let batches = args.batches.unwrap_or(420);
    let mut counts = Vec::new();
    for compact in [None, Some(COMPACT_EVERY)] {
        let name = format!("bench-iceberg-files-{}", compact.is_some());
        let q = rate(name, partitions, batches * ROWS_PER_BATCH, ROWS_PER_BATCH);
        let (_, table) = run_iceberg(&q, compact, shutdown).await?;
        exact &= table.rows == batches * ROWS_PER_BATCH;
        counts.push(json!({
            "compact_every_batches": compact,
            "batches": batches,
            "files_written": table.added_files,
            "files_in_table": table.live_files,
            "manifests_in_table": table.manifests,
            "compactions": table.compactions,
            "files_per_hour_at_1s": table.live_files * BATCHES_PER_HOUR / batches,
        }));
    }
    let figures = json!({
        "scenario": "iceberg",
        "cores": cores(),
        "rows": args.rows,
        "partitions": partitions,
        "max_rows_per_batch": args.max_rows_per_batch,
        "parquet_file_sink_rows_per_second": best[0].round(),
        "iceberg_rows_per_second": best[1].round(),
        "iceberg_over_parquet": round3(best[1] / best[0]),
        "file_counts": counts,
        "exact": exact,
    });
    Ok((figures, u8::from(!exact)))
}

async fn run_iceberg(
    q: &RateQuery,
    compact: Option<u64>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(f64, Table)> {
    let (_dir, root, out) = workdir()?;
    let catalog = format!("{out}/catalog.db");
    std::fs::create_dir_all(&out)?;
    let mut sink = json!({
        "catalog": {"sql": {"uri": format!("sqlite://{catalog}")}},
        "warehouse": format!("{out}/warehouse"),
        "namespace": "bench",
        "table": "rate",
    });
    if let Some(every) = compact {
        sink["compact"] = json!({"every_batches": every});
    }
    let spec = q.spec_text_with(json!({"sink": {"iceberg": sink}}));
    let (c, client) = cluster::start(&root, shutdown).await?;
    let run = cluster::run_query(c, client, &q.name, &spec).await?;
    let table = SqlTable {
        file: catalog.into(),
        catalog: "default".into(),
        namespace: "bench".into(),
        table: "rate".into(),
    };
    // A compaction after the last batch may still run: the table is read
    // as the cluster left it.
    Ok((run.seconds, read(&verify::stores(), &table).await?))
}

/// Reads the file at the full location `uri`.
async fn read_at(stores: &Stores, uri: &str) -> anyhow::Result<Vec<u8>> {
    let (dir, name) = uri.rsplit_once('/').unwrap_or(("", uri));
    let got = stores.open(dir)?.get(&Path::from(name)).await?;
    Ok(got
        .ok_or_else(|| anyhow::anyhow!("{uri} is missing"))?
        .to_vec())
}

/// The table's current snapshot, from its manifests: its live files and
/// their rows; and from its snapshots, the files the batches appended.
async fn read(stores: &Stores, table: &SqlTable) -> anyhow::Result<Table> {
    let file = table
        .current()
        .await?
        .ok_or_else(|| anyhow::anyhow!("{} has no table", table.describe()))?;
    let meta = TableMetadata::parse(&file, &read_at(stores, &file).await?)?;
    let mut out = Table::default();
    for s in meta.ancestry() {
        match s.summary.get(COMPACTED_BY_KEY) {
            Some(_) => out.compactions += 1,
            None => {
                let added = s.summary.get("added-data-files");
                out.added_files += added.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    let Some(current) = meta.current() else {
        return Ok(out);
    };
    let list = read_manifest_list(
        &current.manifest_list,
        &read_at(stores, &current.manifest_list).await?,
    )?;
    for e in &list {
        let (path, sequence, _) =
            manifest_of(e).ok_or_else(|| anyhow::anyhow!("a bad list entry"))?;
        out.manifests += 1;
        for entry in read_manifest(path, &read_at(stores, path).await?, sequence)? {
            if entry.status != Status::Deleted {
                out.live_files += 1;
                out.rows += entry.file.records;
            }
        }
    }
    Ok(out)
}
