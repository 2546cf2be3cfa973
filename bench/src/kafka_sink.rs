//! `sluice-bench kafka-sink`: JSON records pre-loaded into a topic of a
//! broker with transactions (noida-db, a child process), read by a query
//! through a projection into another topic, once with `at_least_once` and
//! once with `exactly_once`.
//!
//! ```text
//!  noida-db ◄── load: --records JSON records into `input`, 4 partitions
//!    │          (the produce ceiling: the same client, 4 partitions in parallel)
//!    ├─► fetch ceiling: the same client reads `input` back
//!    ├─► query at_least_once: input ─► SQL ─► `alo` ─► every partition read ─► stop
//!    ├─► query exactly_once:  input ─► SQL ─► `eo`  ─► every partition read ─► stop
//!    └─► check: a read_committed reader finds each record once in `eo`, at least once in `alo`
//! ```
//!
//! A query's time runs from submit to the progress that shows every input
//! partition read to its end, which is published only once the batch
//! committed (its transactions included).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use sluice_kafka::Kafka;
use sluice_proto::QueryRef;
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, RUN_LIMIT, cores, workdir};
use super::child::ChildProcess;
use super::cluster;
use super::kafka::{PARTITIONS, connect, load, read_back, source};
use sluice_cli::inproc::free_addr;
use sluice_cli::stats::round3;

const INPUT: &str = "input";
const SQL: &str = "SELECT value, upper(city) AS city, score * 2 AS score2 FROM input";

/// One query's run.
struct Run {
    seconds: f64,
    batches: u64,
    /// The longest transaction any progress reported (exactly_once).
    longest_ms: u64,
    committed: u64,
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let records = args.records;
    let (dir, root, _) = workdir()?;
    let servers = free_addr()?.to_string();
    let port = servers.rsplit_once(':').map_or("", |(_, p)| p).to_string();
    let data = dir.path().join("noida");
    let mut broker = ChildProcess::new(
        PathBuf::from(&args.noida_bin),
        [
            "start",
            "--only",
            "kafka",
            "--kafka-port",
            &port,
            "--host",
            "127.0.0.1",
            "--data-dir",
            &data.display().to_string(),
        ]
        .map(String::from)
        .to_vec(),
        dir.path().join("noida.log"),
    );
    broker.start()?;
    let kafka = connect(&servers).await?;
    for topic in [INPUT, "alo", "eo"] {
        kafka.create_topic(topic, PARTITIONS).await?;
    }

    let t = Instant::now();
    let (bytes, _) = load(&kafka, INPUT, records).await?;
    let produce_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let read = read_back(&kafka, INPUT).await?;
    let fetch_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(read == records, "read back {read} of {records} records");

    let (mut c, mut client) = cluster::start(&root, shutdown).await?;
    let (alo, eo) = c
        .supervise(async {
            let alo = query(&mut client, args, &servers, "at_least_once", "alo").await?;
            let eo = query(&mut client, args, &servers, "exactly_once", "eo").await?;
            Ok((alo, eo))
        })
        .await?;
    c.shutdown(sluice_cli::inproc::GRACE).await?;

    let (alo_seen, alo_dups) = output(&kafka, "alo", records).await?;
    let (eo_seen, eo_dups) = output(&kafka, "eo", records).await?;
    kafka.close().await?;
    // Its data is a temporary directory's: nothing to shut down cleanly
    // (noida-db may take longer than 10 s to exit on SIGTERM).
    broker.kill()?;
    let exact = eo_seen == records && eo_dups == 0 && alo_seen == records;
    let rate = |s: f64| (records as f64 / s).round();
    let figures = json!({
        "scenario": "kafka-sink",
        "cores": cores(),
        "broker": "noida-db 0.2.3",
        "records": records,
        "partitions": PARTITIONS,
        "value_bytes": bytes,
        "sql": SQL,
        "max_records_per_partition": args.max_rows_per_batch / PARTITIONS as u64,
        "executors": 1,
        "slots": cluster::SLOTS,
        "ceiling": {
            "produce_rows_per_second": rate(produce_s),
            "fetch_rows_per_second": rate(fetch_s),
        },
        "at_least_once": {
            "batches": alo.batches,
            "seconds": round3(alo.seconds),
            "rows_per_second": rate(alo.seconds),
            "distinct_records_out": alo_seen,
            "duplicates": alo_dups,
        },
        "exactly_once": {
            "batches": eo.batches,
            "seconds": round3(eo.seconds),
            "rows_per_second": rate(eo.seconds),
            "transactions_committed": eo.committed,
            "longest_transaction_ms": eo.longest_ms,
            "distinct_records_out": eo_seen,
            "duplicates": eo_dups,
        },
        "exactly_once_vs_at_least_once": round3(alo.seconds / eo.seconds),
        "exact": exact,
    });
    Ok((figures, u8::from(!exact)))
}

/// Runs the projection from `input` into `topic` with `delivery` until it
/// has read every record, then stops it.
async fn query(
    client: &mut sluice_cli::client::Client,
    args: &BenchArgs,
    servers: &str,
    delivery: &str,
    topic: &str,
) -> anyhow::Result<Run> {
    let name = format!("bench-kafka-sink-{topic}");
    let spec = json!({
        "name": name,
        "source": source(servers, INPUT, args.max_rows_per_batch),
        "trigger": {"interval_ms": 0},
        "sql": SQL,
        "sink": {"kafka": {"bootstrap_servers": servers, "topic": topic, "delivery": delivery}},
    });
    let started = Instant::now();
    sluice_cli::queries::submit(client, &spec.to_string()).await?;
    let mut run = Run {
        seconds: 0.0,
        batches: 0,
        longest_ms: 0,
        committed: 0,
    };
    let deadline = Instant::now() + RUN_LIMIT;
    let mut last_batch = None;
    loop {
        let q = name.clone();
        let status = client
            .call(|mut rpc| {
                let query = q.clone();
                async move { rpc.get(QueryRef { query }).await }
            })
            .await?;
        anyhow::ensure!(
            status.state() == sluice_proto::QueryState::Running,
            "query {name} is {:?}: {}",
            status.state(),
            status.error
        );
        if let Some(p) = &status.latest_progress {
            if last_batch != Some(p.batch_id)
                && let Some(t) = p.kafka_transactions
            {
                run.longest_ms = run.longest_ms.max(t.longest_ms);
                run.committed += t.committed;
            }
            last_batch = Some(p.batch_id);
            if p.partitions.iter().map(|p| p.end_offset).sum::<i64>() >= args.records as i64 {
                run.seconds = started.elapsed().as_secs_f64();
                run.batches = p.batch_id + 1;
                break;
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "query {name} did not finish in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client
        .call(|mut rpc| {
            let query = name.clone();
            async move { rpc.stop(QueryRef { query }).await }
        })
        .await?;
    Ok(run)
}

/// What a `read_committed` reader finds in `topic`: the distinct input
/// values among `0..records`, and the records seen more than once.
async fn output(kafka: &Kafka, topic: &str, records: u64) -> anyhow::Result<(u64, u64)> {
    let mut seen = HashSet::with_capacity(records as usize);
    let mut dups = 0u64;
    for p in 0..PARTITIONS {
        let client = kafka.partition(topic, p, true).await?;
        let (mut at, end) = (client.earliest().await?, client.latest().await?);
        while at < end {
            let f = client
                .fetch(at, 8 << 20, Duration::from_millis(500))
                .await?;
            for r in &f.records {
                let row: Value = serde_json::from_slice(r.value.as_deref().unwrap_or_default())
                    .with_context(|| format!("{topic}/{p}@{}: not JSON", r.offset))?;
                let value = row["value"].as_u64().context("a record without `value`")?;
                anyhow::ensure!(value < records, "{topic}: value {value} was never produced");
                dups += u64::from(!seen.insert(value));
            }
            anyhow::ensure!(
                f.next > at,
                "{topic}/{p}: no progress at offset {at} of {end}"
            );
            at = f.next;
        }
        client.close().await?;
    }
    Ok((seen.len() as u64, dups))
}
