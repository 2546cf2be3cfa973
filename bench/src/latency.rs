//! The per-batch scenarios, at trigger 0 with every row available at once:
//!
//! - `overhead`: 10 rows per batch over 2 partitions, so a batch's time is
//!   the engine's fixed cost (plan, WAL, tasks, sink commit, commit);
//! - `partitions`: 1024 partitions with 10 rows each per batch, so a
//!   batch's time is dominated by its per-task cost.
//!
//! Both report the median and p99 of the driver's own batch durations,
//! phase by phase, then check the sink.

use serde_json::{Value, json};
use sluice_proto::{BatchProgress, Durations};
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, UNBOUNDED_RPS, cores};
use super::cluster;
use super::secure::BenchTls;
use super::storage::BenchStorage;
use sluice_cli::stats::{Summary, round3};
use sluice_cli::verify;

/// Rows per partition per batch in `partitions`; rows per batch in `overhead`.
const ROWS: u64 = 10;

/// One per-batch run's shape.
struct Shape {
    scenario: &'static str,
    partitions: u32,
    rows_per_batch: u64,
    batches: u64,
}

pub async fn overhead(
    args: &BenchArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Value, u8)> {
    let shape = Shape {
        scenario: "overhead",
        partitions: args.partitions.unwrap_or(2),
        rows_per_batch: ROWS,
        batches: args.batches.unwrap_or(200),
    };
    run(shape, args, shutdown).await
}

pub async fn partitions(
    args: &BenchArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Value, u8)> {
    let partitions = args.partitions.unwrap_or(1024);
    let shape = Shape {
        scenario: "partitions",
        partitions,
        rows_per_batch: ROWS * u64::from(partitions),
        batches: args.batches.unwrap_or(100),
    };
    run(shape, args, shutdown).await
}

async fn run(
    shape: Shape,
    args: &BenchArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Value, u8)> {
    let storage = BenchStorage::prepare(args.storage, &args.moto_bin).await?;
    let (root, out) = (&storage.root, &storage.out);
    let total = shape.batches * shape.rows_per_batch;
    let q = cluster::unbounded_rate(
        format!("bench-{}", shape.scenario),
        shape.partitions,
        total,
        shape.rows_per_batch,
        out,
    );
    let tls = args.tls.then(BenchTls::new).transpose()?;
    let (cluster, client) =
        cluster::start_on(root, &storage.stores, tls.as_ref(), shutdown).await?;
    let before = storage.stores.requests();
    let run = cluster::run_query(cluster, client, &q.name, &q.spec_text()).await?;
    let committed = run.status.last_committed_batch + 1;
    let requests = super::requests_json(&storage.stores.requests().since(&before), committed);
    let report = verify::check_with(&storage.stores, out, Some(total)).await?;
    let batches: Vec<&BatchProgress> = run.batches.values().collect();
    let part = |f: fn(&Durations) -> u64| -> Value {
        let v: Vec<f64> = batches
            .iter()
            .map(|p| f(&p.duration_ms.unwrap_or_default()) as f64)
            .collect();
        Summary::of(&v).map_or(Value::Null, |s| s.to_json())
    };
    let total_ms = part(|d| d.total);
    let figures = json!({
        "scenario": shape.scenario,
        "storage": storage.kind.as_str(),
        "tls": args.tls,
        "cores": cores(),
        "batches": shape.batches,
        "rows_per_batch": shape.rows_per_batch,
        "total_rows": total,
        "partitions": shape.partitions,
        "rows_per_second_source": UNBOUNDED_RPS,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
        "batches_committed": committed,
        "batches_sampled": batches.len(),
        "median_ms": total_ms["median"],
        "p99_ms": total_ms["p99"],
        "mean_ms": total_ms["mean"],
        "max_ms": total_ms["max"],
        "total_ms": total_ms,
        "phases_ms": {
            "latest_offset": part(|d| d.latest_offset),
            "wal_commit": part(|d| d.wal_commit),
            "execution": part(|d| d.execution),
            "sink_commit": part(|d| d.sink_commit),
            "commit": part(|d| d.commit),
        },
        "wall_seconds": round3(run.seconds),
        "wall_ms_per_batch": round3(run.seconds * 1000.0 / shape.batches.max(1) as f64),
        "requests": requests,
        "verify": verify::report_json(&report),
    });
    Ok((figures, verify::exit_code(&report)))
}
