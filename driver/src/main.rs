//! `sluice-driver` binary: flags and environment, logging, and signals.
//! SIGTERM or SIGINT cancels the shutdown token: a leader stops its term,
//! resigns and exits.

use clap::Parser;
use sluice_driver::{Cli, DriverConfig};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    sluice_common::telemetry::init(cli.log_format);
    let config = DriverConfig::try_from(cli)?;
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(sluice_common::shutdown::cancel_on_signal(shutdown.clone()));
    let result = sluice_driver::run(config, shutdown).await;
    signals.abort();
    result?;
    Ok(())
}
