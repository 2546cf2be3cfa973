//! `sluice bench SCENARIO`: runs a scenario on a local cluster and prints
//! its figures as JSON. `throughput` and `overhead` run here on an
//! in-process cluster; `recovery` (a driver child process) is in
//! `recovery.rs` and `failover` (etcd and two drivers) in `failover.rs`;
//! the flags and the shared setup are in `args.rs`. Every result carries
//! `cores` and the scenario's parameters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use sluice_proto::{BatchProgress, QueryState};
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::inproc::{self, InProcess};
use crate::progress;
use crate::queries::{self, RateQuery};
use crate::stats::{Summary, round3};
use crate::{output, verify};

mod args;
mod child;
mod failover;
mod recovery;

pub use args::{BenchArgs, Scenario};
use args::{RUN_LIMIT, UNBOUNDED_RPS, cores, workdir};

pub async fn run(args: BenchArgs) -> anyhow::Result<u8> {
    let shutdown = CancellationToken::new();
    let signals = inproc::spawn_signal_handler(shutdown.clone());
    let result = match args.scenario {
        Scenario::Throughput => throughput(&args, &shutdown).await,
        Scenario::Overhead => overhead(&args, &shutdown).await,
        Scenario::Recovery => recovery::run(&args, &shutdown).await,
        Scenario::Failover => failover::run(&args, &shutdown).await,
    };
    shutdown.cancel();
    let _ = signals.await;
    let (figures, code) = result?;
    if args.json {
        println!("{figures}");
    } else {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    }
    Ok(code)
}

/// An in-process driver and one executor with 2 slots; returns the cluster
/// and a client that has seen the executor attach.
async fn start_cluster(
    root: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<(InProcess, Client)> {
    let listen = inproc::free_addr()?;
    let addr = inproc::advertise(listen);
    let mut cluster = InProcess::new(shutdown.child_token());
    cluster.spawn_driver(&inproc::driver_args(listen, None, root, "bench-driver"))?;
    cluster.spawn_executor(
        vec![addr.clone()],
        "bench-executor",
        2,
        Duration::from_secs(1),
    );
    let mut client = Client::new(vec![addr])?;
    cluster
        .supervise(queries::wait_for_executors(
            &mut client,
            1,
            Duration::from_secs(30),
        ))
        .await?;
    Ok((cluster, client))
}

async fn throughput(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let (_dir, root, out) = workdir()?;
    let partitions = args.partitions.unwrap_or(8);
    let q = RateQuery {
        name: "bench-throughput".into(),
        partitions,
        rows_per_second: UNBOUNDED_RPS,
        total_rows: Some(args.rows),
        trigger_ms: 0,
        max_rows_per_batch: Some(args.max_rows_per_batch),
        sink: out.clone(),
    };
    let (mut cluster, mut client) = start_cluster(&root, shutdown).await?;
    let started = Instant::now();
    let status = cluster
        .supervise(async {
            queries::submit(&mut client, &q.spec_text()).await?;
            queries::wait_terminal(&mut client, &q.name, RUN_LIMIT).await
        })
        .await?;
    let secs = started.elapsed().as_secs_f64();
    cluster.shutdown(inproc::GRACE).await?;
    ensure_finished(&status)?;
    let report = verify::check(&out, Some(args.rows)).await?;
    let figures = json!({
        "scenario": "throughput",
        "cores": cores(),
        "rows": args.rows,
        "partitions": partitions,
        "max_rows_per_batch": args.max_rows_per_batch,
        "rows_per_second_source": UNBOUNDED_RPS,
        "trigger_ms": 0,
        "executors": 1,
        "slots": 2,
        "batches": status.last_committed_batch + 1,
        "seconds": round3(secs),
        "rows_per_second": (args.rows as f64 / secs).round(),
        "verify": verify::report_json(&report),
    });
    Ok((figures, verify::exit_code(&report)))
}

async fn overhead(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    const ROWS_PER_BATCH: u64 = 10;
    let (_dir, root, out) = workdir()?;
    let partitions = args.partitions.unwrap_or(2);
    let total = args.batches * ROWS_PER_BATCH;
    let q = RateQuery {
        name: "bench-overhead".into(),
        partitions,
        rows_per_second: UNBOUNDED_RPS,
        total_rows: Some(total),
        trigger_ms: 0,
        max_rows_per_batch: Some(ROWS_PER_BATCH),
        sink: out.clone(),
    };
    let (mut cluster, mut client) = start_cluster(&root, shutdown).await?;
    let token = CancellationToken::new();
    let started = Instant::now();
    let (status, batches) = cluster
        .supervise(async {
            queries::submit(&mut client, &q.spec_text()).await?;
            // Follow while it runs, then read what the driver retained, in
            // case the follow stream started after the first batches.
            let mut seen = BTreeMap::new();
            let mut keep = |p: &BatchProgress| {
                seen.insert(p.batch_id, p.clone());
            };
            let follow = progress::stream(&mut client, &q.name, true, &token, &mut keep);
            tokio::time::timeout(RUN_LIMIT, follow)
                .await
                .context("the query did not finish in time")??;
            progress::stream(&mut client, &q.name, false, &token, &mut keep).await?;
            let status = queries::wait_terminal(&mut client, &q.name, RUN_LIMIT).await?;
            Ok((status, seen))
        })
        .await?;
    let secs = started.elapsed().as_secs_f64();
    cluster.shutdown(inproc::GRACE).await?;
    ensure_finished(&status)?;
    let report = verify::check(&out, Some(total)).await?;
    let part = |f: fn(&sluice_proto::Durations) -> u64| -> Value {
        let v: Vec<f64> = batches
            .values()
            .map(|p| f(&p.duration_ms.unwrap_or_default()) as f64)
            .collect();
        Summary::of(&v).map_or(Value::Null, |s| s.to_json())
    };
    let total_ms = part(|d| d.total);
    let figures = json!({
        "scenario": "overhead",
        "cores": cores(),
        "batches": args.batches,
        "rows_per_batch": ROWS_PER_BATCH,
        "total_rows": total,
        "partitions": partitions,
        "rows_per_second_source": UNBOUNDED_RPS,
        "trigger_ms": 0,
        "executors": 1,
        "slots": 2,
        "batches_committed": status.last_committed_batch + 1,
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
        "wall_seconds": round3(secs),
        "wall_ms_per_batch": round3(secs * 1000.0 / args.batches.max(1) as f64),
        "verify": verify::report_json(&report),
    });
    Ok((figures, verify::exit_code(&report)))
}

fn ensure_finished(status: &sluice_proto::QueryStatus) -> anyhow::Result<()> {
    if status.state() == QueryState::Finished {
        return Ok(());
    }
    anyhow::bail!(
        "query {} ended {}: {}",
        status.name,
        output::state_name(status.state),
        status.error
    )
}
