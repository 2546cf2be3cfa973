//! `sluice-bench`: runs a benchmark scenario on a local cluster and prints
//! its figures as JSON (`sluice-bench SCENARIO [FLAGS]`). Run as `sluice-bench
//! driver ...` or `sluice-bench executor ...` it is a node, as `sluice` is:
//! the scenarios that kill and restart nodes start this executable as them.

use std::process::ExitCode;

use clap::Parser;
use sluice_bench::BenchArgs;
use sluice_cli::node;

/// Sluice's benchmarks: a scenario on a local cluster, its figures as JSON.
#[derive(Debug, Parser)]
#[command(name = "sluice-bench", version, about)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() -> ExitCode {
    node::main(|| {
        init_quiet_logs();
        sluice_bench::run(Cli::parse().args)
    })
}

/// Logs for a scenario: warnings only unless SLUICE_LOG or RUST_LOG says
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
        let cli = Cli::try_parse_from(["sluice-bench", "overhead", "--json"]).unwrap();
        assert!(cli.args.json && cli.args.scenario == sluice_bench::Scenario::Overhead);
    }
}
