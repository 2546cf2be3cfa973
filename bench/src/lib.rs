//! `sluice-bench SCENARIO`: runs a scenario on a local cluster and prints
//! its figures as JSON. Every result carries `cores` and the scenario's
//! parameters, and every scenario ends by checking its sink.
//!
//! | scenario | file |
//! |---|---|
//! | `throughput` | here: the rate source into jsonl |
//! | `overhead`, `partitions` | `latency.rs`: per-batch time at trigger 0 |
//! | `sql-stateless`, `files` | `sql.rs`: SQL over the rate and file sources |
//! | `recovery` | `recovery.rs`: a driver child process killed and restarted |
//! | `failover` | `failover.rs`: etcd and two drivers |
//! | `stateful`, `windowed` | `stateful.rs`: GROUP BY over the rate source, in update and append mode |
//! | `join` | `join.rs`: two rate streams joined within an event-time bound, into Parquet |
//! | `state-recovery` | `state_recovery.rs`: 1 M keys of state reloaded after a SIGKILL of driver and executor |
//! | `state-scale` | `state_scale.rs`: 10 M keys of state, batches touching 1 % of them: batch times, executor RSS, restarts after SIGKILLs |
//! | `kafka` | `kafka.rs`: 10 M JSON records from a real broker into Parquet |
//! | `kafka-sink` | `kafka_sink.rs`: JSON records through a projection into another topic, at-least-once and exactly-once |
//! | `nexmark` | `nexmark.rs`: the Nexmark queries (`crate::nexmark::queries`) into the discard sink |
//! | `delta` | `delta.rs`: the rate source into a Delta table against the Parquet file sink; data files per hour, with and without compaction |
//! | `iceberg` | `iceberg.rs`: the same into an Iceberg table (SQL catalog on SQLite) |
//!
//! The flags are in `args.rs`, the in-process cluster in `cluster.rs`, the
//! stateful scenarios' sink checks in `state_check.rs`.

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use sluice_cli::inproc;
use sluice_cli::stats::round3;
use sluice_cli::verify;

mod args;
mod child;
mod cluster;
mod delta;
mod failover;
mod iceberg;
mod join;
mod kafka;
mod kafka_sink;
mod latency;
pub mod nexmark;
mod recovery;
mod secure;
mod sql;
mod state_check;
mod state_recovery;
mod state_scale;
mod stateful;
mod storage;

pub use args::{BenchArgs, Scenario};
use args::{UNBOUNDED_RPS, cores};
use storage::BenchStorage;

/// The storage requests of a run, by kind: in all and per committed batch.
fn requests_json(n: &sluice_common::storage::RequestCounts, batches: i64) -> Value {
    let per = |v: u64| round3(v as f64 / batches.max(1) as f64);
    json!({
        "total": n,
        "per_batch": {
            "put": per(n.put),
            "get": per(n.get),
            "head": per(n.head),
            "list": per(n.list),
            "delete": per(n.delete),
            "multipart": per(n.multipart),
            "copy": per(n.copy),
        },
    })
}

pub async fn run(args: BenchArgs) -> anyhow::Result<u8> {
    let on_s3 = [Scenario::Throughput, Scenario::Overhead, Scenario::Recovery];
    anyhow::ensure!(
        args.storage == args::StorageKind::Local || on_s3.contains(&args.scenario),
        "--storage s3 applies to throughput, overhead and recovery"
    );
    let shutdown = CancellationToken::new();
    let signals = inproc::spawn_signal_handler(shutdown.clone());
    let result = match args.scenario {
        Scenario::Throughput => throughput(&args, &shutdown).await,
        Scenario::Overhead => latency::overhead(&args, &shutdown).await,
        Scenario::Partitions => latency::partitions(&args, &shutdown).await,
        Scenario::SqlStateless => sql::stateless(&args, &shutdown).await,
        Scenario::Files => sql::files(&args, &shutdown).await,
        Scenario::Recovery => recovery::run(&args, &shutdown).await,
        Scenario::Failover => failover::run(&args, &shutdown).await,
        Scenario::Stateful => stateful::stateful(&args, &shutdown).await,
        Scenario::Windowed => stateful::windowed(&args, &shutdown).await,
        Scenario::StateRecovery => state_recovery::run(&args, &shutdown).await,
        Scenario::StateScale => state_scale::run(&args, &shutdown).await,
        Scenario::Kafka => kafka::run(&args, &shutdown).await,
        Scenario::KafkaSink => kafka_sink::run(&args, &shutdown).await,
        Scenario::Join => join::run(&args, &shutdown).await,
        Scenario::Nexmark => nexmark::run(&args, &shutdown).await,
        Scenario::Delta => delta::run(&args, &shutdown).await,
        Scenario::Iceberg => iceberg::run(&args, &shutdown).await,
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

async fn throughput(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let storage = BenchStorage::prepare(args.storage, &args.moto_bin).await?;
    let (root, out) = (&storage.root, &storage.out);
    let partitions = args.partitions.unwrap_or(8);
    let q = cluster::unbounded_rate(
        "bench-throughput".into(),
        partitions,
        args.rows,
        args.max_rows_per_batch,
        out,
    );
    let (cluster, client) = cluster::start_on(root, &storage.stores, None, shutdown).await?;
    let before = storage.stores.requests();
    let run = cluster::run_query(cluster, client, &q.name, &q.spec_text()).await?;
    let batches = run.status.last_committed_batch + 1;
    let requests = requests_json(&storage.stores.requests().since(&before), batches);
    let report = verify::check_with(&storage.stores, out, Some(args.rows)).await?;
    let figures = json!({
        "scenario": "throughput",
        "storage": storage.kind.as_str(),
        "cores": cores(),
        "rows": args.rows,
        "partitions": partitions,
        "max_rows_per_batch": args.max_rows_per_batch,
        "rows_per_second_source": UNBOUNDED_RPS,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
        "batches": batches,
        "seconds": round3(run.seconds),
        "rows_per_second": (args.rows as f64 / run.seconds).round(),
        "requests": requests,
        "verify": verify::report_json(&report),
    });
    Ok((figures, verify::exit_code(&report)))
}
