//! `sluice-executor` binary: flags and environment, logging, and signals.
//! SIGTERM or SIGINT cancels the shutdown token, which drains the executor.

use clap::Parser;
use sluice_executor::{Cli, ExecutorConfig};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sluice_common::telemetry::init();
    let config = ExecutorConfig::try_from(Cli::parse())?;
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signal(shutdown.clone()));
    let result = sluice_executor::run(config, shutdown).await;
    signals.abort();
    result?;
    Ok(())
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
    }
    shutdown.cancel();
}
