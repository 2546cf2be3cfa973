//! `sluice-executor` binary: flags and environment, logging, and signals.
//! SIGTERM or SIGINT cancels the shutdown token, which drains the executor.

use clap::Parser;
use sluice_executor::{Cli, ExecutorConfig};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    sluice_common::telemetry::init(cli.log_format);
    let config = ExecutorConfig::try_from(cli)?;
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(sluice_common::shutdown::cancel_on_signal(shutdown.clone()));
    let result = sluice_executor::run(config, shutdown).await;
    signals.abort();
    result?;
    Ok(())
}
