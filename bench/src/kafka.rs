//! `sluice-bench kafka`: a Kafka topic of JSON records, pre-loaded into a
//! real broker (tansu, SQLite storage, a child process), read by a query
//! through a filter and a projection into Parquet.
//!
//! ```text
//!  tansu ◄── load: --records JSON records, 4 partitions, value n in partition n % 4
//!    │
//!    ├─► ceiling: the same client reads every partition back, in parallel
//!    └─► query: submit ─► batches ─► every partition read to its end ─► stop ─► check the sink
//! ```
//!
//! The query's time runs from submit to the progress that shows every
//! partition read to its end. The ceiling is the broker's own read rate
//! with the client Sluice uses, which no query can beat.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use sluice_kafka::{Kafka, NewRecord};
use sluice_proto::QueryRef;
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, RUN_LIMIT, cores, workdir};
use super::child::ChildProcess;
use super::cluster;
use super::sql::check;
use sluice_cli::inproc::free_addr;
use sluice_cli::stats::round3;

const TOPIC: &str = "bench";
pub(super) const PARTITIONS: i32 = 4;
/// Records in one produce request.
const PRODUCE_BATCH: usize = 10_000;
/// Keeps rows whose score is at least 10 (nine in ten).
const SQL: &str =
    "SELECT value, upper(city) AS city, score * 2 AS score2 FROM input WHERE score >= 10";
const CITIES: [&str; 5] = ["Lyon", "Oslo", "Kyiv", "Lima", "Pune"];

/// The JSON value of record `value`, and whether the query keeps it.
pub(super) fn record(value: u64) -> (Vec<u8>, bool) {
    let score = (value * 7919 % 1000) as f64 / 10.0;
    let city = CITIES[(value % 5) as usize];
    let text = format!(r#"{{"value":{value},"city":"{city}","score":{score:.1}}}"#);
    (text.into_bytes(), score >= 10.0)
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let records = args.records;
    let (dir, root, out) = workdir()?;
    let broker_dir = dir.path().join("broker");
    std::fs::create_dir_all(&broker_dir)?;
    let servers = free_addr()?.to_string();
    let url = format!("tcp://{servers}");
    let mut broker = ChildProcess::new(
        PathBuf::from(&args.tansu_bin),
        [
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
            "--storage-engine",
            "sqlite://kafka.db",
        ]
        .map(String::from)
        .to_vec(),
        dir.path().join("tansu.log"),
    )
    .in_dir(broker_dir);
    broker.start()?;
    let kafka = connect(&servers).await?;
    kafka.create_topic(TOPIC, PARTITIONS).await?;

    let t = Instant::now();
    let (bytes, kept) = load(&kafka, TOPIC, records).await?;
    kafka.close().await?;
    let load_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let read = read_back(&kafka, TOPIC).await?;
    let ceiling_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(read == records, "read back {read} of {records} records");

    let spec = json!({
        "name": "bench-kafka",
        "source": source(&servers, TOPIC, args.max_rows_per_batch),
        "trigger": {"interval_ms": 0},
        "sql": SQL,
        "sink": {"files": {"path": out, "format": "parquet"}},
    });
    let (mut c, mut client) = cluster::start(&root, shutdown).await?;
    let (seconds, batches) = c
        .supervise(async {
            let started = Instant::now();
            sluice_cli::queries::submit(&mut client, &spec.to_string()).await?;
            let batches = read_to_end(&mut client, "bench-kafka", records).await?;
            let seconds = started.elapsed().as_secs_f64();
            client
                .call(|mut rpc| async move {
                    rpc.stop(QueryRef {
                        query: "bench-kafka".into(),
                    })
                    .await
                })
                .await?;
            Ok((seconds, batches))
        })
        .await?;
    c.shutdown(sluice_cli::inproc::GRACE).await?;
    broker.signal(Signal::SIGTERM)?;
    broker.reap(Duration::from_secs(10)).await?;
    let (verify, exact) = check(&out, records, kept).await?;
    let figures = json!({
        "scenario": "kafka",
        "cores": cores(),
        "broker": "tansu 0.6.0 (sqlite)",
        "records": records,
        "partitions": PARTITIONS,
        "value_bytes": bytes,
        "sql": SQL,
        "sink_format": "parquet",
        "max_records_per_partition": args.max_rows_per_batch / PARTITIONS as u64,
        "trigger_ms": 0,
        "executors": 1,
        "slots": cluster::SLOTS,
        "load_seconds": round3(load_s),
        "ceiling": {
            "seconds": round3(ceiling_s),
            "rows_per_second": (records as f64 / ceiling_s).round(),
            "mb_per_second": round3(bytes as f64 / 1e6 / ceiling_s),
        },
        "query": {
            "batches": batches,
            "seconds": round3(seconds),
            "rows_per_second": (records as f64 / seconds).round(),
            "mb_per_second": round3(bytes as f64 / 1e6 / seconds),
            "output_rows": kept,
        },
        "verify": verify,
    });
    Ok((figures, u8::from(!exact)))
}

/// The source of [`record`]s in `topic`, at most `max_rows_per_batch` a
/// batch over its [`PARTITIONS`] partitions.
pub(super) fn source(servers: &str, topic: &str, max_rows_per_batch: u64) -> Value {
    json!({"kafka": {
        "bootstrap_servers": servers,
        "topic": topic,
        "format": "json",
        "schema": [
            {"name": "value", "type": "bigint"},
            {"name": "city", "type": "string"},
            {"name": "score", "type": "double"},
        ],
        "max_records_per_partition": max_rows_per_batch / PARTITIONS as u64,
    }})
}

/// Connects once the broker answers (it starts in well under a second).
pub(super) async fn connect(servers: &str) -> anyhow::Result<Kafka> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Kafka::connect(servers, Duration::from_secs(30)).await {
            Ok(k) => return Ok(k),
            Err(e) if Instant::now() > deadline => {
                return Err(e).context("the broker did not answer within 30 s");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Produces `0..records` to `topic` (value n to partition n % 4), the
/// partitions in parallel; returns the values' bytes and how many the
/// query keeps.
pub(super) async fn load(kafka: &Kafka, topic: &str, records: u64) -> anyhow::Result<(u64, u64)> {
    let now = sluice_common::time::now_ms();
    let parts = (0..PARTITIONS).map(|p| async move {
        let client = kafka.partition(topic, p, true).await?;
        let (mut bytes, mut kept) = (0u64, 0u64);
        let mine: Vec<u64> = (p as u64..records).step_by(PARTITIONS as usize).collect();
        for chunk in mine.chunks(PRODUCE_BATCH) {
            let batch = chunk
                .iter()
                .map(|&n| {
                    let (value, keep) = record(n);
                    bytes += value.len() as u64;
                    kept += u64::from(keep);
                    NewRecord {
                        key: None,
                        value,
                        timestamp_ms: now,
                    }
                })
                .collect();
            client.produce(batch).await?;
        }
        Ok::<_, sluice_common::Error>((bytes, kept))
    });
    let sums = futures::future::try_join_all(parts).await?;
    Ok(sums
        .into_iter()
        .fold((0, 0), |(b, k), (b2, k2)| (b + b2, k + k2)))
}

/// Reads every partition of `topic` to its end with the client Sluice
/// uses, in parallel; returns the records read.
pub(super) async fn read_back(kafka: &Kafka, topic: &str) -> anyhow::Result<u64> {
    let parts = (0..PARTITIONS).map(|p| async move {
        let client = kafka.partition(topic, p, true).await?;
        let end = client.latest().await?;
        let (mut from, mut n) = (0i64, 0u64);
        while from < end {
            let f = client
                .fetch(from, 8 << 20, Duration::from_millis(500))
                .await?;
            let Some(last) = f.records.last() else { break };
            from = last.offset + 1;
            n += f.records.len() as u64;
        }
        client.close().await?;
        Ok::<_, sluice_common::Error>(n)
    });
    Ok(futures::future::try_join_all(parts)
        .await?
        .into_iter()
        .sum())
}

/// Polls the query until its progress shows every partition read to its
/// end (`records` in all); returns the batches it took.
async fn read_to_end(
    client: &mut sluice_cli::client::Client,
    query: &str,
    records: u64,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        let status = client
            .call(|mut rpc| async move {
                rpc.get(QueryRef {
                    query: query.into(),
                })
                .await
            })
            .await?;
        anyhow::ensure!(
            status.state() == sluice_proto::QueryState::Running,
            "the query is {:?}: {}",
            status.state(),
            status.error
        );
        if let Some(p) = &status.latest_progress
            && p.partitions.iter().map(|p| p.end_offset).sum::<i64>() >= records as i64
        {
            return Ok(p.batch_id + 1);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the query did not read every record in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
