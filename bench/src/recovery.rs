//! `sluice-bench recovery`: `sluice driver` runs as a child
//! process (always killed on exit or panic by [`ChildProcess`]'s `Drop`),
//! with one in-process executor. Each round SIGKILLs the driver, restarts it
//! at once with the same flags, and times the kill → first new commit, by
//! polling the query's `commits/` directory every 5 ms.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_common::storage::AllowedPaths;
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, cores};
use super::child::{ChildProcess, POLL, commit_above, highest_commit};
use super::storage::BenchStorage;
use sluice_cli::client::Client;
use sluice_cli::inproc::{self, InProcess};
use sluice_cli::queries::{self, RateQuery};
use sluice_cli::stats::{Summary, round3};
use sluice_cli::verify;

const TRIGGER_MS: u64 = 200;
const ROWS_PER_SECOND: u64 = 100_000;
const QUERY: &str = "bench-recovery";

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let storage = BenchStorage::prepare(args.storage, &args.moto_bin).await?;
    let (dir, root, out) = (&storage.dir, &storage.root, &storage.out);
    let listen = inproc::free_addr()?;
    let addr = inproc::advertise(listen);
    let driver_args = inproc::driver_args(listen, None, root, "bench-recovery-driver");
    let mut driver = ChildProcess::sluice("driver", driver_args, dir.path().join("driver.log"))?
        .with_env(storage.env.clone());
    driver.start()?;
    let mut cluster = InProcess::with_stores(shutdown.child_token(), storage.stores.clone());
    cluster.confine(AllowedPaths::data_dir_of(root).map_err(anyhow::Error::msg)?);
    cluster.spawn_executor(
        vec![addr.clone()],
        "bench-executor",
        2,
        Duration::from_secs(1),
    );
    let partitions = args.partitions.unwrap_or(4);
    let q = RateQuery {
        name: QUERY.into(),
        partitions,
        rows_per_second: ROWS_PER_SECOND,
        total_rows: None,
        trigger_ms: TRIGGER_MS,
        max_rows_per_batch: None,
        sink: out.clone(),
        sql: None,
        format: "jsonl",
    };
    let commits = storage.checkpoint(QUERY)?;
    let rounds = cluster
        .supervise(async {
            let mut client = Client::new(vec![addr.clone()])?;
            queries::submit(&mut client, &q.spec_text()).await?;
            commit_above(&commits, Some(1)).await?;
            let mut rounds = Vec::new();
            for i in 0..args.iterations {
                let t0 = Instant::now();
                driver.kill()?;
                // Read after the kill: nothing the old driver did can count.
                let before = highest_commit(&commits).await?;
                driver.start()?;
                let after = commit_above(&commits, before).await?;
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                tracing::info!(round = i, ms, ?before, after, "recovered");
                rounds.push(json!({ "ms": round3(ms), "before": before, "after": after }));
                // Let the restarted driver settle before the next kill.
                commit_above(&commits, Some(after)).await?;
            }
            client
                .call(|mut rpc| async move {
                    rpc.stop(sluice_proto::QueryRef {
                        query: QUERY.into(),
                    })
                    .await
                })
                .await?;
            Ok(rounds)
        })
        .await;
    let stopped = cluster.shutdown(inproc::GRACE).await;
    driver.kill()?;
    let rounds = match rounds {
        Ok(r) => r,
        Err(e) if shutdown.is_cancelled() => return Err(e),
        Err(e) => {
            let log = storage.dir.keep().join("driver.log");
            return Err(e.context(format!(
                "recovery failed (driver log kept: {})",
                log.display()
            )));
        }
    };
    stopped?;
    let report = verify::check_with(&storage.stores, out, None).await?;
    let ms: Vec<f64> = rounds.iter().filter_map(|r| r["ms"].as_f64()).collect();
    let summary = Summary::of(&ms).map_or(Value::Null, |s| s.to_json());
    let figures = json!({
        "scenario": "recovery",
        "storage": storage.kind.as_str(),
        "cores": cores(),
        "iterations": args.iterations,
        "partitions": partitions,
        "rows_per_second_source": ROWS_PER_SECOND,
        "trigger_ms": TRIGGER_MS,
        "executors": 1,
        "slots": 2,
        "poll_ms": POLL.as_millis(),
        "rounds": rounds,
        "recovery_ms": ms,
        "median_ms": summary["median"],
        "max_ms": summary["max"],
        "summary_ms": summary,
        "verify": verify::report_json(&report),
    });
    Ok((figures, verify::exit_code(&report)))
}
