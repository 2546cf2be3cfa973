//! Leadership: who may plan, dispatch and commit.
//!
//! - Standalone (no `--etcd`): the driver claims the next epoch by creating
//!   `<root>/epochs/<E>` (with its id and advertised address) and leads
//!   until it stops, or until a later claim appears: then it points at that
//!   claimant for a moment and exits non-zero, so that a supervisor sees it.
//! - Elected (`--etcd`): see [`etcd`]. The epoch is the revision of the
//!   leader key, a fencing token that only grows.
//!
//! Either way, leading means owning one [`Term`]; losing the leadership
//! cancels it.

pub mod detect;
pub mod etcd;
pub mod leadership;
pub mod lease;
pub mod probe;
pub mod takeover;
mod value;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_common::backoff::Backoff;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::error::DriverError;
use crate::query;
use crate::state::{Driver, Role, Term};
use leadership::Leadership;

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
                let delay = CLAIM_BACKOFF.delay(failures);
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

/// Between attempts to claim an epoch on storage that is not there yet.
const CLAIM_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// How often a standalone leader looks for a newer epoch claim.
const EPOCH_POLL: Duration = Duration::from_millis(500);
/// How long a deposed standalone driver keeps pointing clients and
/// executors at its successor before it exits.
const DEPOSED_GRACE: Duration = Duration::from_secs(3);

/// Claims an epoch and leads with it until `cancel` fires, or until a newer
/// standalone driver claims a later epoch: then this one points at its
/// successor for [`DEPOSED_GRACE`] and fails with `Replaced`, so that it
/// exits non-zero instead of claiming an epoch again and deposing it back.
async fn lead_once(driver: &Arc<Driver>, cancel: &CancellationToken) -> Result<(), DriverError> {
    let config = &driver.config;
    let claim = driver.checkpoint.claim_epoch(&config.id, &config.advertise);
    let epoch = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Ok(()),
        epoch = claim => epoch?,
    };
    let term = Term::new(
        epoch,
        driver,
        cancel.child_token(),
        Leadership::standalone(),
    );
    info!(epoch, driver = %config.id, advertise = %config.advertise, "leading (standalone)");
    let begun = begin(driver, &term).await;
    if begun.is_ok() {
        watch_epochs(driver, &term).await;
    }
    driver.set_role(Role::Starting);
    if cancel.is_cancelled() || begun.is_err() {
        term.shutdown().await;
        return begun;
    }
    // The term ended while the process goes on: deposed, or a bug.
    let successor = match driver.checkpoint.highest_epoch().await? {
        newer if newer > epoch => driver
            .checkpoint
            .epoch_claim(newer)
            .await?
            .map(|c| (newer, c)),
        _ => None,
    };
    let Some((newer, claim)) = successor else {
        term.shutdown().await;
        warn!(epoch, "the term ended without a newer epoch; leading again");
        return Err(DriverError::Cancelled);
    };
    let leader = Some(claim.advertise.clone()).filter(|a| !a.is_empty());
    driver.set_role(Role::Standby {
        leader,
        leader_ui: None,
    });
    term.shutdown().await;
    error!(
        epoch,
        successor_epoch = newer,
        successor = %claim.driver,
        successor_advertise = %claim.advertise,
        grace_ms = DEPOSED_GRACE.as_millis() as u64,
        "deposed by a newer standalone driver; pointing at it, then exiting"
    );
    tokio::select! {
        biased;
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(DEPOSED_GRACE) => {}
    }
    Err(DriverError::Replaced {
        epoch,
        by: format!(
            "driver {} at {} (epoch {newer})",
            claim.driver, claim.advertise
        ),
    })
}

/// Returns once `term` is cancelled: by shutdown, by a write that found
/// another epoch's file ([`Driver::confirm_leadership`]), or here, when a
/// later epoch has been claimed.
async fn watch_epochs(driver: &Driver, term: &Term) {
    loop {
        tokio::select! {
            biased;
            _ = term.cancel.cancelled() => return,
            _ = tokio::time::sleep(EPOCH_POLL) => {}
        }
        match driver.checkpoint.highest_epoch().await {
            Ok(highest) if highest > term.epoch => {
                warn!(
                    epoch = term.epoch,
                    highest, "a later epoch was claimed; stepping down"
                );
                term.cancel.cancel();
            }
            Ok(_) => {}
            Err(e) => warn!(epoch = term.epoch, error = %e, "cannot read the epoch claims"),
        }
    }
}

/// Makes `term` the current one: executors may attach at once; the query
/// API opens once every query is loaded.
pub async fn begin(driver: &Arc<Driver>, term: &Arc<Term>) -> Result<(), DriverError> {
    driver.set_role(Role::Leader(term.clone()));
    driver.metrics.elections_won.inc();
    query::load_all(driver, term).await?;
    // Every running query found in the checkpoint ran under an earlier
    // epoch: this term takes it over.
    if term
        .queries
        .list()
        .iter()
        .any(|q| q.state() == crate::lifecycle::QueryState::Running)
    {
        driver.metrics.failovers.inc();
    }
    term.loaded.store(true, Ordering::Release);
    Ok(())
}
