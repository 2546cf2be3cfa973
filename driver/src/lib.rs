//! The Sluice driver: the query API, executor membership, the scheduler and
//! the micro-batch runner.

pub mod config;
pub mod error;

pub use config::{Cli, DriverConfig};
pub use error::DriverError;

use tokio_util::sync::CancellationToken;

/// Runs a driver until `shutdown` is cancelled or a component fails.
pub async fn run(config: DriverConfig, shutdown: CancellationToken) -> Result<(), DriverError> {
    let _ = config;
    shutdown.cancelled().await;
    Ok(())
}
