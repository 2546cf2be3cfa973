//! `sluice`: the one Sluice binary. It runs a cluster's nodes (`sluice
//! driver`, `sluice executor`), is the command-line client of a cluster,
//! and runs `sluice local` (a whole cluster in one process), `sluice verify`
//! (the exactly-once checker) and `sluice state` (SQL over a query's
//! state). This file owns the flags and the dispatch; the commands are in
//! the crate's library (`lib.rs`), the runtime and the printing of errors
//! in `node::main`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use sluice_cli::client::{self, Client};
use sluice_cli::{certs, commands, local, nexmark, node, progress, state, verify};

/// Sluice, a distributed micro-batch stream processor: its nodes (`sluice
/// driver`, `sluice executor`), its client, and a whole cluster in one
/// process (`sluice local`).
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
    /// CA (PEM) of the driver's certificate: connect over TLS.
    #[arg(long, global = true, env = "SLUICE_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) signed by the driver's --client-ca; its
    /// OU is the role. An alternative to --token.
    #[arg(long, global = true, env = "SLUICE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, global = true, env = "SLUICE_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Bearer token for a driver with --auth-tokens.
    #[arg(long, global = true, env = "SLUICE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a driver: it plans batches, keeps the checkpoint and serves the
    /// gRPC API, the metrics and the web UI. Flags: `sluice driver --help`.
    #[command(disable_help_flag = true)]
    Driver {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        flags: Vec<String>,
    },
    /// Run an executor: it attaches to the drivers and runs tasks. Flags:
    /// `sluice executor --help`.
    #[command(disable_help_flag = true)]
    Executor {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        flags: Vec<String>,
    },
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
    /// Run SQL over a query's latest committed state, read from the
    /// checkpoint (no driver needed): `--sql "SELECT ... FROM state"`.
    State(state::StateArgs),
    /// Write a CA, certificates and tokens for a secured development cluster.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Tokens for the driver's --auth-tokens file.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Run a driver, two executors and a demo query in this process.
    Local(local::LocalArgs),
    /// The Nexmark benchmark's events as files.
    #[command(subcommand)]
    Nexmark(nexmark::NexmarkCommand),
}

#[derive(Debug, Subcommand)]
enum CertsCommand {
    /// Write ca.pem, the driver, executor, client and etcd certificates, and
    /// tokens.yaml with admin, viewer and executor tokens, into DIR.
    Init(certs::InitArgs),
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Print a new random token, and its --auth-tokens entry on stderr.
    New {
        /// admin, viewer or executor.
        #[arg(long)]
        role: String,
        /// The entry's name in logs (default: the role).
        #[arg(long)]
        name: Option<String>,
    },
}

fn main() -> ExitCode {
    node::main(|| run(Cli::parse()))
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let client = || -> anyhow::Result<Client> {
        let tls = sluice_common::tls::ClientTls::from_flags(
            cli.tls_ca.clone(),
            cli.tls_cert.clone(),
            cli.tls_key.clone(),
        )?;
        let token = sluice_common::tls::Bearer::new(cli.token.as_deref())?;
        Ok(Client::new(client::parse_addrs(&cli.driver))?.secured(tls, token))
    };
    match cli.command {
        Command::Driver { .. } | Command::Executor { .. } => {
            unreachable!(
                "main dispatches `driver` and `executor` before parsing the client's flags"
            )
        }
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
        Command::State(args) => state::command(&args).await,
        Command::Certs(CertsCommand::Init(args)) => certs::init(&args).map(|()| 0),
        Command::Token(TokenCommand::New { role, name }) => {
            certs::new(&role, name.as_deref()).map(|()| 0)
        }
        Command::Local(args) => local::run(args).await,
        Command::Nexmark(cmd) => nexmark::command(cmd),
    }
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
    }
}
