//! The in-process cluster the throughput and latency scenarios share: a
//! driver and one executor with 2 slots, a query run from submit to its
//! end, and the progress records the driver kept for it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_common::storage::{AllowedPaths, Stores};
use sluice_proto::{BatchProgress, QueryState, QueryStatus};
use tokio_util::sync::CancellationToken;

use super::args::{RUN_LIMIT, UNBOUNDED_RPS};
use super::secure::BenchTls;
use sluice_cli::client::Client;
use sluice_cli::inproc::{self, InProcess};
use sluice_cli::queries::RateQuery;
use sluice_cli::{output, progress, queries};

/// The executor's task slots.
pub const SLOTS: u32 = 2;

/// An in-process driver and one executor with [`SLOTS`] slots; returns the
/// cluster and a client that has seen the executor attach.
pub async fn start(
    root: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<(InProcess, Client)> {
    start_on(root, &sluice_cli::verify::stores(), None, shutdown).await
}

/// [`start`], with the nodes allowed `inputs` (absolute directories) as
/// well as the directory of `root`.
pub async fn start_reading(
    root: &str,
    inputs: &[String],
    memory: Memory,
    shutdown: &CancellationToken,
) -> anyhow::Result<(InProcess, Client)> {
    let stores = sluice_cli::verify::stores();
    start_with(root, &stores, None, (inputs, Some(memory)), shutdown).await
}

/// What the executor of [`start_reading`] may hold: state, and each
/// task's operators.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub state_bytes: u64,
    pub task_bytes: u64,
    /// The executor's `--state-memory-bytes`.
    pub state_memory_bytes: u64,
}

/// [`start`], with every node opening storage through `stores`, and with
/// TLS, mutual TLS and a token when `tls` is given.
pub async fn start_on(
    root: &str,
    stores: &Stores,
    tls: Option<&BenchTls>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(InProcess, Client)> {
    start_with(root, stores, tls, (&[], None), shutdown).await
}

async fn start_with(
    root: &str,
    stores: &Stores,
    tls: Option<&BenchTls>,
    (inputs, memory): (&[String], Option<Memory>),
    shutdown: &CancellationToken,
) -> anyhow::Result<(InProcess, Client)> {
    let listen = inproc::free_addr()?;
    let addr = inproc::advertise(listen);
    let mut cluster = InProcess::with_stores(shutdown.child_token(), stores.clone());
    let mut driver_args = inproc::driver_args(listen, None, root, "bench-driver");
    // The executor is confined as the driver is: to the directory that
    // holds the checkpoint root, and the inputs.
    let data_dir = AllowedPaths::data_dir_of(root).map_err(anyhow::Error::msg)?;
    let mut allowed = data_dir.prefixes();
    allowed.extend(inputs.iter().cloned());
    cluster.confine(AllowedPaths::parse(&allowed).map_err(anyhow::Error::msg)?);
    if !inputs.is_empty() {
        driver_args.extend(["--allowed-paths".to_string(), allowed.join(",")]);
    }
    let mut client = Client::new(vec![addr.clone()])?;
    if let Some(tls) = tls {
        driver_args.extend(tls.driver_args());
        cluster.secure_executors(tls.executor_tls()?);
        let (client_tls, token) = tls.client()?;
        client = client.secured(client_tls, token);
    }
    cluster.spawn_driver(&driver_args)?;
    if let Some(m) = memory {
        cluster.executor_state_bytes(m.state_bytes);
        cluster.executor_task_memory_bytes(m.task_bytes);
        cluster.executor_state_memory_bytes(m.state_memory_bytes);
    }
    cluster.spawn_executor(
        vec![addr.clone()],
        "bench-executor",
        SLOTS,
        Duration::from_secs(1),
    );
    cluster
        .supervise(queries::wait_for_executors(
            &mut client,
            1,
            Duration::from_secs(30),
        ))
        .await?;
    Ok((cluster, client))
}

/// A rate query at trigger 0 with every row available at once:
/// `total_rows` in batches of at most `max_rows_per_batch`, into jsonl at
/// `sink`, with no SQL.
pub fn unbounded_rate(
    name: String,
    partitions: u32,
    total_rows: u64,
    max_rows_per_batch: u64,
    sink: &str,
) -> RateQuery {
    RateQuery {
        name,
        partitions,
        rows_per_second: UNBOUNDED_RPS,
        total_rows: Some(total_rows),
        trigger_ms: 0,
        max_rows_per_batch: Some(max_rows_per_batch),
        sink: sink.to_string(),
        sql: None,
        format: "jsonl",
    }
}

/// What one run of a query left: its end state, its batches' progress by
/// batch id, and the seconds from submit to the end.
pub struct Run {
    pub status: QueryStatus,
    pub batches: BTreeMap<u64, BatchProgress>,
    pub seconds: f64,
}

/// Submits `spec` as `name`, follows its progress until it ends, and shuts
/// the cluster down. The time runs from the submit call to the end state.
pub async fn run_query(
    mut cluster: InProcess,
    mut client: Client,
    name: &str,
    spec: &str,
) -> anyhow::Result<Run> {
    let token = CancellationToken::new();
    let started = Instant::now();
    let (status, batches, seconds) = cluster
        .supervise(async {
            queries::submit(&mut client, spec).await?;
            // Follow while it runs, then read what the driver retained, in
            // case the follow stream started after the first batches.
            let mut seen = BTreeMap::new();
            let mut keep = |p: &BatchProgress| {
                seen.insert(p.batch_id, p.clone());
            };
            let follow = progress::stream(&mut client, name, true, &token, &mut keep);
            tokio::time::timeout(RUN_LIMIT, follow)
                .await
                .context("the query did not finish in time")??;
            let status = queries::wait_terminal(&mut client, name, RUN_LIMIT).await?;
            let seconds = started.elapsed().as_secs_f64();
            progress::stream(&mut client, name, false, &token, &mut keep).await?;
            Ok((status, seen, seconds))
        })
        .await?;
    cluster.shutdown(inproc::GRACE).await?;
    ensure_finished(&status)?;
    Ok(Run {
        status,
        batches,
        seconds,
    })
}

fn ensure_finished(status: &QueryStatus) -> anyhow::Result<()> {
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
