//! `sluice-bench failover`: a three-process cluster (2 drivers, 1
//! executor) on a local etcd with a 2 s lease. Each round signals the
//! leader (SIGKILL, then SIGTERM for planned handovers) and times the
//! signal → the first commit of a newer epoch, by polling the query's
//! `commits/` directory. The signalled driver is restarted as a standby
//! before the next round. Every child process is killed on exit.
//!
//! ```text
//!  cluster 1: --fast-failover true   SIGKILL ×kills, SIGTERM ×handovers
//!  cluster 2: --fast-failover false  SIGKILL ×kills (the lease decides)
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use sluice_common::checkpoint::{Checkpoint, QueryCheckpoint};
use sluice_common::storage::Stores;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, cores, workdir};
use super::child::{ChildProcess, POLL, commit, commit_above, highest_commit};
use super::secure::BenchTls;
use sluice_cli::client::Client;
use sluice_cli::inproc::{self, free_addr};
use sluice_cli::queries::{self, RateQuery};
use sluice_cli::stats::{Summary, round3};
use sluice_cli::verify;

const TTL_MS: u64 = 2000;
const QUERY: &str = "bench-failover";
const LIMIT: Duration = Duration::from_secs(30);

struct Driver {
    process: ChildProcess,
    http: SocketAddr,
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let fast = measure(args, shutdown, true, args.kills, args.handovers).await?;
    let lease = measure(args, shutdown, false, args.kills, 0).await?;
    let summary = |v: &[f64]| Summary::of(v).map_or(Value::Null, |s| s.to_json());
    let ms = |v: &[f64]| v.iter().map(|m| round3(*m)).collect::<Vec<_>>();
    let (k, t, l) = (
        summary(&fast.kills),
        summary(&fast.terms),
        summary(&lease.kills),
    );
    let figures = json!({
        "scenario": "failover",
        "tls": args.tls,
        "cores": cores(),
        "lease_ttl_ms": TTL_MS,
        "drivers": 2,
        "executors": 1,
        "trigger_ms": TRIGGER_MS,
        "poll_ms": POLL.as_millis(),
        "kill_to_commit_ms": ms(&fast.kills),
        "kill_median_ms": k["median"],
        "kill_p99_ms": k["p99"],
        "kill_max_ms": k["max"],
        "kill_lease_only_to_commit_ms": ms(&lease.kills),
        "kill_lease_only_median_ms": l["median"],
        "kill_lease_only_p99_ms": l["p99"],
        "kill_lease_only_max_ms": l["max"],
        "sigterm_to_commit_ms": ms(&fast.terms),
        "sigterm_median_ms": t["median"],
        "sigterm_max_ms": t["max"],
        "verify": verify::report_json(&fast.report),
        "verify_lease_only": verify::report_json(&lease.report),
    });
    let code = verify::exit_code(&fast.report).max(verify::exit_code(&lease.report));
    Ok((figures, code))
}

const TRIGGER_MS: u64 = 100;

/// What one cluster measured.
struct Measured {
    kills: Vec<f64>,
    terms: Vec<f64>,
    report: sluice_common::verify::Report,
}

/// Runs one cluster, its drivers with `--fast-failover <fast>`.
async fn measure(
    args: &BenchArgs,
    shutdown: &CancellationToken,
    fast: bool,
    kills: u32,
    handovers: u32,
) -> anyhow::Result<Measured> {
    let (dir, root, out) = workdir()?;
    let tls = args.tls.then(BenchTls::new).transpose()?;
    let etcd_bin =
        which("etcd").context("the failover benchmark needs etcd (apt-get install etcd-server)")?;
    let (client_addr, peer_addr) = (free_addr()?, free_addr()?);
    let etcd_url = format!("http://{client_addr}");
    let etcd_args = [
        "--name",
        "bench",
        "--data-dir",
        &dir.path().join("etcd").display().to_string(),
        "--listen-client-urls",
        &etcd_url,
        "--advertise-client-urls",
        &etcd_url,
        "--listen-peer-urls",
        &format!("http://{peer_addr}"),
        "--initial-advertise-peer-urls",
        &format!("http://{peer_addr}"),
        "--initial-cluster",
        &format!("bench=http://{peer_addr}"),
    ]
    .map(str::to_string)
    .to_vec();
    let mut etcd = ChildProcess::new(etcd_bin, etcd_args, dir.path().join("etcd.log"));
    etcd.start()?;
    wait_for(|| async { tokio::net::TcpStream::connect(client_addr).await.is_ok() }).await?;

    let mut drivers = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..2 {
        let (listen, http) = (free_addr()?, free_addr()?);
        let mut a = inproc::driver_args(listen, Some(http), &root, &format!("bench-driver-{i}"));
        a.extend(
            [
                "--etcd",
                &etcd_url,
                "--cluster",
                "bench",
                "--lease-ttl-ms",
                &TTL_MS.to_string(),
                "--fast-failover",
                &fast.to_string(),
            ]
            .map(str::to_string),
        );
        if let Some(tls) = &tls {
            a.extend(tls.driver_args());
        }
        let log = dir.path().join(format!("driver-{i}.log"));
        let mut process = ChildProcess::sluice("driver", a, log)?;
        process.start()?;
        addrs.push(inproc::advertise(listen));
        drivers.push(Driver { process, http });
    }
    let executor_args = [
        "--driver",
        &addrs.join(","),
        "--slots",
        "2",
        "--heartbeat-ms",
        "200",
        "--id",
        "bench-executor",
    ]
    .map(str::to_string)
    .to_vec();
    let executor_args = match &tls {
        Some(tls) => [executor_args, tls.executor_args()].concat(),
        None => executor_args,
    };
    let mut executor =
        ChildProcess::sluice("executor", executor_args, dir.path().join("executor.log"))?;
    executor.start()?;

    let q = RateQuery {
        name: QUERY.into(),
        partitions: args.partitions.unwrap_or(4),
        rows_per_second: 100_000,
        total_rows: None,
        trigger_ms: TRIGGER_MS,
        max_rows_per_batch: None,
        sink: out.clone(),
        sql: None,
        format: "jsonl",
    };
    let commits = Checkpoint::open(&Stores::default(), &root)?.query(QUERY);
    let measured = tokio::select! {
        biased;
        _ = shutdown.cancelled() => Err(anyhow::anyhow!("interrupted")),
        r = rounds((kills, handovers), &q, &addrs, tls.as_ref(), &mut drivers, &commits) => r,
    };
    let ((kills, terms), _dir) =
        super::args::kept_on_failure(measured, false, dir, "failover benchmark")?;
    executor.kill()?;
    for d in &mut drivers {
        d.process.kill()?;
    }
    etcd.kill()?;
    let report = verify::check(&out, None).await?;
    Ok(Measured {
        kills,
        terms,
        report,
    })
}

/// (SIGKILL rounds, SIGTERM rounds).
async fn rounds(
    (n_kills, n_terms): (u32, u32),
    q: &RateQuery,
    addrs: &[String],
    tls: Option<&BenchTls>,
    drivers: &mut [Driver],
    commits: &QueryCheckpoint,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut client = Client::new(addrs.to_vec())?;
    if let Some(tls) = tls {
        let (client_tls, token) = tls.client()?;
        client = client.secured(client_tls, token);
    }
    queries::submit(&mut client, &q.spec_text()).await?;
    commit_above(commits, Some(1)).await?;
    let mut kills = Vec::new();
    let mut terms = Vec::new();
    for (signal, n, out) in [
        (Signal::SIGKILL, n_kills, &mut kills),
        (Signal::SIGTERM, n_terms, &mut terms),
    ] {
        for round in 0..n {
            let leader = find_leader(drivers).await?;
            let epoch = latest_epoch(commits).await?;
            let t0 = Instant::now();
            drivers[leader].process.signal(signal)?;
            wait_for(|| async { latest_epoch(commits).await.is_ok_and(|e| e > epoch) }).await?;
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            tracing::info!(round, ?signal, ms, "failover");
            out.push(ms);
            let d = &mut drivers[leader];
            d.process.reap(Duration::from_secs(10)).await?;
            d.process.start()?;
            let http = d.http;
            wait_for(|| async move { http_status(http, "/healthz").await == Some(200) }).await?;
            // Let the cluster settle before the next round.
            let now = highest_commit(commits).await?;
            commit_above(commits, now).await?;
        }
    }
    Ok((kills, terms))
}

/// The index of the driver whose `/readyz` answers 200.
async fn find_leader(drivers: &[Driver]) -> anyhow::Result<usize> {
    let deadline = Instant::now() + LIMIT;
    loop {
        for (i, d) in drivers.iter().enumerate() {
            if http_status(d.http, "/readyz").await == Some(200) {
                return Ok(i);
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no driver became the leader within {LIMIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The epoch of the query's highest commit.
async fn latest_epoch(qc: &QueryCheckpoint) -> anyhow::Result<u64> {
    let n = highest_commit(qc).await?.context("no commit yet")?;
    Ok(commit(qc, n).await?.epoch)
}

async fn wait_for<F, Fut>(mut probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + LIMIT;
    while !probe().await {
        anyhow::ensure!(Instant::now() < deadline, "timed out after {LIMIT:?}");
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// The status code of `GET path`, or `None` when nothing answers.
async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.ok()?;
        let line = std::str::from_utf8(&buf[..n]).ok()?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_millis(500), probe)
        .await
        .ok()
        .flatten()
}

/// `name` on the `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
