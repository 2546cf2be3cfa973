//! `sluice local`: a whole cluster in one process (a standalone driver and
//! two executors), a demo query, and its progress printed live until Ctrl-C
//! or SIGTERM cancels the one shutdown token.
//!
//! The demo query ([`demo`]) computes 10-second windows with a watermark in
//! append mode. The screen ([`screen`]) shows where things are (the
//! checkpoint, the data, the log file, the web UI's URL), commands to try,
//! and each committed batch followed by the windows it finalised. The
//! cluster's logs go to `<dir>/sluice-local.log` (filtered by `SLUICE_LOG`),
//! never to the screen. On a terminal a batch is a table row; otherwise it
//! is one plain `progress` line, for scripts.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use sluice_common::storage::AllowedPaths;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use crate::client::Client;
use crate::inproc::{self, InProcess};
use crate::output;
use crate::progress::{self, Outcome};
use crate::queries::{self, RateQuery};

mod demo;
mod screen;

pub const DEMO_QUERY: &str = "demo";
/// The log file, under `--dir`.
pub const LOG_FILE: &str = "sluice-local.log";

/// The flags of `local`.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// Where the checkpoint (`<dir>/checkpoints`) and the demo output (`<dir>/out`) live.
    #[arg(long, default_value = "./sluice-data")]
    pub dir: PathBuf,
    /// The driver's gRPC address.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// The driver's HTTP address: the web UI (http://ADDR/), /healthz,
    /// /readyz and /metrics.
    #[arg(long, default_value = "127.0.0.1:7071")]
    pub http: SocketAddr,
    /// The demo query's rate.
    #[arg(long, default_value_t = 1000)]
    pub rows_per_second: u64,
    /// The demo query's partitions.
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// Where queries' sources, tables and sinks may be (PREFIX[,PREFIX...]:
    /// absolute paths, file:// URLs, s3://, gs:// or az:// URLs), for the
    /// driver and the executors. Default: `--dir` and the system's
    /// temporary directory (`$TMPDIR`, else `/tmp`), where the README's
    /// examples read and write.
    #[arg(long, value_delimiter = ',')]
    pub allowed_paths: Vec<String>,
}

/// `--allowed-paths`, or `dir` and the temporary directory.
fn allowed_paths(args: &LocalArgs, dir: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let given: Vec<String> = args
        .allowed_paths
        .iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if !given.is_empty() {
        return Ok(given);
    }
    let tmp = std::path::absolute(std::env::temp_dir())?;
    [dir, tmp.as_path()].iter().map(|p| path_str(p)).collect()
}

pub async fn run(args: LocalArgs) -> anyhow::Result<u8> {
    let dir = std::path::absolute(&args.dir)
        .with_context(|| format!("bad --dir {}", args.dir.display()))?;
    let checkpoints = dir.join("checkpoints");
    let out = dir.join("out");
    for d in [&checkpoints, &out] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let log = dir.join(LOG_FILE);
    sluice_common::telemetry::init_file(&log)
        .with_context(|| format!("cannot open the log file {}", log.display()))?;
    let (checkpoints, out) = (path_str(&checkpoints)?, path_str(&out)?);
    let allowed = allowed_paths(&args, &dir)?;
    let confined =
        AllowedPaths::parse(&allowed).map_err(|r| anyhow::anyhow!("bad --allowed-paths: {r}"))?;
    println!(
        "sluice local: driver on {} (http {})",
        args.listen, args.http
    );
    println!("  checkpoint: {checkpoints}");
    println!("  data:       {out}");
    println!(
        "  allowed:    {} (--allowed-paths)",
        confined.prefixes().join(", ")
    );
    println!(
        "  logs:       {} (SLUICE_LOG sets the filter)",
        log.display()
    );
    println!("  web UI:     {}", screen::ui_url(args.http));

    let shutdown = CancellationToken::new();
    let signals = inproc::spawn_signal_handler(shutdown.clone());
    let mut driver_args =
        inproc::driver_args(args.listen, Some(args.http), &checkpoints, "local-driver");
    driver_args.extend(["--allowed-paths".to_string(), allowed.join(",")]);
    let addr = inproc::advertise(args.listen);
    let mut cluster = InProcess::new(shutdown.clone());
    cluster.confine(confined);
    cluster.spawn_driver(&driver_args)?;
    for i in 0..2 {
        let id = format!("local-executor-{i}");
        cluster.spawn_executor(vec![addr.clone()], &id, 2, Duration::from_secs(1));
    }

    let demo = RateQuery {
        name: DEMO_QUERY.to_string(),
        partitions: args.partitions,
        rows_per_second: args.rows_per_second,
        total_rows: None,
        trigger_ms: 1000,
        max_rows_per_batch: None,
        sink: out,
        sql: Some(demo::SQL.to_string()),
        format: "jsonl",
    };
    let result = follow_demo(&addr, &demo, &shutdown).await;
    if let Err(e) = &result {
        eprintln!("error: {e:#}");
    }
    println!("shutting down");
    shutdown.cancel();
    let stopped = cluster.shutdown(inproc::GRACE).await;
    let _ = signals.await;
    stopped?;
    Ok(u8::from(result.is_err()))
}

/// Submits the demo query (or adopts the one already there) and prints its
/// progress, and the windows it finalises, until `shutdown`.
async fn follow_demo(
    addr: &str,
    demo: &RateQuery,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut client = Client::new(vec![addr.to_string()])?;
    let sink = submit_demo(&mut client, demo, shutdown).await?;
    if shutdown.is_cancelled() {
        return Ok(());
    }
    println!("try, from another terminal:");
    let default = screen::default_driver();
    for c in screen::commands(&screen::program(), DEMO_QUERY, addr, &default) {
        println!("  {c}");
    }
    println!("progress of {DEMO_QUERY} (Ctrl-C to stop):");
    let printer = screen::Printer {
        terminal: std::io::stdout().is_terminal(),
        sink,
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let follow = async move {
        let outcome = progress::stream(&mut client, DEMO_QUERY, true, shutdown, |p| {
            if tx.send(p.clone()).is_err() {
                tracing::warn!(batch = p.batch_id, "the screen stopped; batch not shown");
            }
        })
        .await;
        // The printer ends once it has shown every batch sent.
        drop(tx);
        outcome
    };
    let (outcome, ()) = tokio::join!(follow, printer.run(rx));
    if let Outcome::Terminal(state) = outcome? {
        println!(
            "query {DEMO_QUERY} is {}; the cluster keeps running until Ctrl-C",
            output::state_name(state)
        );
        shutdown.cancelled().await;
    }
    Ok(())
}

/// Submits the demo query, or adopts the `demo` already in the checkpoint,
/// and prints what it computes. Returns the sink to read its windows from;
/// `None` when the query in the checkpoint is not the windowed demo, or
/// when `shutdown` came first.
async fn submit_demo(
    client: &mut Client,
    demo: &RateQuery,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<demo::Sink>> {
    let spec = demo::spec_text(demo);
    let submitted = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(None),
        r = queries::submit(client, &spec) => r,
    };
    match submitted {
        Ok(r) => println!("submitted query {} ({})", r.name, r.id),
        Err(e) if e.code() == Some(Code::AlreadyExists) => {
            println!("query {DEMO_QUERY} already exists in this checkpoint: following it");
        }
        Err(e) if e.code() == Some(Code::FailedPrecondition) => {
            println!("query {DEMO_QUERY} already exists with another spec ({e}): following it");
        }
        Err(e) => return Err(e.into()),
    }
    let status = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Ok(None),
        s = crate::commands::get(client, DEMO_QUERY) => s?,
    };
    let running = status
        .spec
        .as_ref()
        .map(sluice_common::spec::QuerySpec::try_from)
        .transpose()
        .map_err(|e| anyhow::anyhow!("the spec of query {DEMO_QUERY}: {e}"))?;
    let described = running
        .as_ref()
        .and_then(|s| Some((s, screen::describe(s)?)));
    let Some((running, lines)) = described else {
        println!(
            "query {DEMO_QUERY} in this checkpoint is not the windowed demo: its progress is \
             shown, not its windows (start with an empty --dir to run the windowed demo)"
        );
        return Ok(None);
    };
    for l in lines {
        println!("{l}");
    }
    let path = running
        .sink_path()
        .ok_or_else(|| anyhow::anyhow!("query {DEMO_QUERY} writes no files"))?;
    let sink = demo::Sink::open(&crate::verify::stores(), path)?;
    Ok(Some(sink))
}

fn path_str(p: &std::path::Path) -> anyhow::Result<String> {
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("path is not UTF-8: {}", p.display()))
}
