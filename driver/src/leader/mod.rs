//! Leadership: who may plan, dispatch and commit.
//!
//! - Standalone (no `--etcd`): the driver claims the next epoch by creating
//!   `<root>/epochs/<E>` and leads until it stops.
//! - Elected (`--etcd`): see [`etcd`]. The epoch is the revision of the
//!   leader key, a fencing token that only grows.
//!
//! Either way, leading means owning one [`Term`]; losing the leadership
//! cancels it.

pub mod etcd;
pub mod lease;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::DriverError;
use crate::query;
use crate::query::retry::backoff;
use crate::state::{Driver, Leadership, Role, Term};

/// Runs the leadership of this driver until `cancel` fires.
pub async fn run(driver: Arc<Driver>, cancel: CancellationToken) -> Result<(), DriverError> {
    match driver.config.election.clone() {
        Some(election) => etcd::run(driver, election, cancel).await,
        None => standalone(driver, cancel).await,
    }
}

async fn standalone(driver: Arc<Driver>, cancel: CancellationToken) -> Result<(), DriverError> {
    let mut failures = 0u32;
    loop {
        match lead_once(&driver, &cancel).await {
            Ok(()) => return Ok(()),
            // Storage that is not there yet (a volume still mounting, a
            // network filesystem down): wait and try again, never crash-loop.
            Err(e) if e.is_retryable() && !cancel.is_cancelled() => {
                driver.set_role(Role::Starting);
                let delay = backoff(failures.min(5), 5_000);
                warn!(error = %e, retry_ms = delay.as_millis() as u64, "cannot lead yet; retrying");
                failures += 1;
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Claims an epoch and leads with it until `cancel` fires.
async fn lead_once(driver: &Arc<Driver>, cancel: &CancellationToken) -> Result<(), DriverError> {
    let epoch = driver.checkpoint.claim_epoch(&driver.config.id).await?;
    let term = Term::new(epoch, driver, cancel.child_token(), Leadership::Standalone);
    info!(epoch, driver = %driver.config.id, advertise = %driver.config.advertise, "leading (standalone)");
    let begun = begin(driver, &term).await;
    if begun.is_ok() {
        cancel.cancelled().await;
    }
    driver.set_role(Role::Starting);
    term.shutdown().await;
    begun
}

/// Makes `term` the current one: executors may attach at once; the query
/// API opens once every query is loaded.
pub async fn begin(driver: &Arc<Driver>, term: &Arc<Term>) -> Result<(), DriverError> {
    driver.set_role(Role::Leader(term.clone()));
    query::load_all(driver, term).await?;
    term.loaded.store(true, Ordering::Release);
    Ok(())
}
