//! `sluice`: the command-line client of a Sluice cluster, `sluice local`
//! (a whole cluster in one process), `sluice verify` (the exactly-once
//! checker) and `sluice bench`. This file owns the flags, the dispatch, and
//! the one place where errors are printed (`error: ...`, exit code 1).

mod bench;
mod client;
mod commands;
#[cfg(test)]
mod fake_driver;
mod inproc;
mod local;
mod output;
mod progress;
mod queries;
mod retry;
mod stats;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::client::Client;

/// The Sluice command-line client.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    /// Driver addresses (HOST:PORT, comma-separated); standbys redirect to the leader.
    #[arg(
        long,
        global = true,
        env = "SLUICE_DRIVER",
        value_delimiter = ',',
        default_value = "127.0.0.1:7070"
    )]
    driver: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit a query spec (YAML or JSON); prints the query id.
    Submit { file: PathBuf },
    /// List the queries.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one query (by name or id).
    Status {
        query: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a query's batch progress.
    Progress {
        query: String,
        /// Keep streaming new batches, across driver failovers.
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Stop a query; prints its resulting state.
    Stop { query: String },
    /// Wait for a query to end: exit 0 if FINISHED or STOPPED, 1 if FAILED, 2 on timeout.
    Wait {
        query: String,
        #[arg(long)]
        timeout_s: Option<u64>,
    },
    /// Show the leader, standbys and executors.
    Cluster {
        #[arg(long)]
        json: bool,
    },
    /// Check that a file sink holds every expected row exactly once.
    Verify {
        #[arg(long)]
        sink: String,
        /// The expected rows are 0..N (default: 0..=the largest value found).
        #[arg(long)]
        total_rows: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Run a driver, two executors and a demo query in this process.
    Local(local::LocalArgs),
    /// Run a benchmark scenario on a local cluster; prints JSON.
    Bench(bench::BenchArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let client = || Client::new(client::parse_addrs(&cli.driver));
    match cli.command {
        Command::Submit { file } => commands::submit(&mut client()?, &file).await,
        Command::List { json } => commands::list(&mut client()?, json).await,
        Command::Status { query, json } => commands::status(&mut client()?, &query, json).await,
        Command::Progress {
            query,
            follow,
            json,
        } => progress::command(&mut client()?, &query, follow, json).await,
        Command::Stop { query } => commands::stop(&mut client()?, &query).await,
        Command::Wait { query, timeout_s } => {
            let timeout = timeout_s.map(Duration::from_secs);
            commands::wait(&mut client()?, &query, timeout).await
        }
        Command::Cluster { json } => commands::cluster(&mut client()?, json).await,
        Command::Verify {
            sink,
            total_rows,
            json,
        } => verify::command(&sink, total_rows, json).await,
        Command::Local(args) => local::run(args).await,
        Command::Bench(args) => {
            init_quiet_logs();
            bench::run(args).await
        }
    }
}

/// Logs for `bench`: warnings only unless SLUICE_LOG or RUST_LOG says
/// otherwise, so that logging does not weigh on the figures.
fn init_quiet_logs() {
    let filter = std::env::var("SLUICE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_flags_are_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "sluice",
            "--driver",
            "a:1,b:2",
            "wait",
            "q",
            "--timeout-s",
            "5",
        ])
        .unwrap();
        assert_eq!(cli.driver, vec!["a:1", "b:2"]);
        assert!(matches!(
            cli.command,
            Command::Wait {
                timeout_s: Some(5),
                ..
            }
        ));
        let cli = Cli::try_parse_from(["sluice", "bench", "overhead", "--json"]).unwrap();
        assert!(
            matches!(cli.command, Command::Bench(b) if b.json && b.scenario == bench::Scenario::Overhead)
        );
    }
}
