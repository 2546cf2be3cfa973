//! The pure side of fast failover: what a standby saw of the leader's term,
//! what to do after the probes, and why a new term began. No I/O here;
//! `detect.rs` carries the decisions out.
//!
//! ```text
//!  Seen{epoch, lease, grpc} ─► Observed{epoch, end} ─► cause() at the win
//!  probe verdict ─► next() ─► Revoke | Reopen(pause)
//! ```

use std::time::Duration;

use sluice_common::backoff::Backoff;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::probe::Verdict;

/// The leader as the election shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The leader key's create revision: the leader's epoch.
    pub epoch: u64,
    /// The lease that holds the leader key.
    pub lease: i64,
    /// The leader's advertised gRPC address.
    pub grpc: String,
}

/// How the watched term ended, as far as this standby saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The leader said so, and that it resigned (a SIGTERM handover).
    Resigned,
    /// The leader said its term ended without a resign (it lost its lease).
    Ended,
    /// The stream broke and the port refused: this standby revoked the lease.
    Refused,
}

/// The last term this standby watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub epoch: u64,
    pub end: Option<End>,
}

/// Why this driver's new term began, from what it observed of the one
/// before: `None` when it saw no earlier leader (a fresh cluster).
pub fn cause(previous: Option<Observed>) -> Option<&'static str> {
    let previous = previous?;
    Some(match previous.end {
        Some(End::Refused) => "leader_refused",
        Some(End::Resigned) => "resigned",
        // The leader vanished from etcd without our revoke and without a
        // resign: its lease ran out (or another standby revoked it, which
        // also ends in the key's deletion by etcd).
        Some(End::Ended) | None => "lease_expired",
    })
}

/// What to do once the stream to the leader is gone and the port probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Revoke the watched lease: the process is gone.
    Revoke,
    /// Open the stream again after this pause.
    Reopen(Duration),
}

/// The pause before reopening when the port accepts connections (a restart
/// on the same address, a term still starting).
pub(super) const REOPEN: Backoff =
    Backoff::new(Duration::from_millis(50), Duration::from_millis(500));
/// The pause after an inconclusive probe: the lease decides meanwhile.
const RETRY_INCONCLUSIVE: Backoff =
    Backoff::new(Duration::from_millis(250), Duration::from_secs(2));

/// The decision after the probes. `revoke` is false when fast failover is
/// off (the stream is then only watched for the takeover's cause).
pub fn next(verdict: Verdict, revoke: bool, failures: u32) -> Next {
    match verdict {
        Verdict::Dead if revoke => Next::Revoke,
        Verdict::Dead | Verdict::Alive => Next::Reopen(REOPEN.delay(failures)),
        Verdict::Inconclusive(_) => Next::Reopen(RETRY_INCONCLUSIVE.delay(failures)),
    }
}

/// How long a new leader waits for its detector to learn how the previous
/// term ended (a resign's last event can arrive just after the election).
const SETTLE: Duration = Duration::from_millis(200);

/// Counts the takeover that began `epoch` by its cause, once the previous
/// term's end is known or [`SETTLE`] has passed, then stops the detector.
/// Off the takeover's path: the new term runs meanwhile.
pub async fn count_takeover(
    mut observed: watch::Receiver<Option<Observed>>,
    metrics: crate::metrics::Metrics,
    epoch: u64,
    detector: CancellationToken,
) {
    let _stop = detector.drop_guard();
    let known = |o: &Option<Observed>| o.is_none_or(|o| o.end.is_some());
    let _ = tokio::time::timeout(SETTLE, observed.wait_for(known)).await;
    let previous = *observed.borrow();
    if let Some(cause) = cause(previous) {
        metrics.takeovers.with_label_values(&[cause]).inc();
        info!(
            epoch,
            previous_epoch = previous.map_or(0, |p| p.epoch),
            cause,
            "took over from the previous leader"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn the_cause_follows_what_the_standby_saw() {
        let seen = |end| Some(Observed { epoch: 7, end });
        assert_eq!(cause(None), None);
        assert_eq!(cause(seen(None)), Some("lease_expired"));
        assert_eq!(cause(seen(Some(End::Ended))), Some("lease_expired"));
        assert_eq!(cause(seen(Some(End::Resigned))), Some("resigned"));
        assert_eq!(cause(seen(Some(End::Refused))), Some("leader_refused"));
    }

    #[test]
    fn only_a_dead_verdict_with_revoking_on_revokes() {
        assert_eq!(next(Verdict::Dead, true, 0), Next::Revoke);
        assert_eq!(next(Verdict::Dead, false, 0), Next::Reopen(REOPEN.first));
        assert_eq!(next(Verdict::Alive, true, 0), Next::Reopen(REOPEN.first));
        for kind in [
            ErrorKind::TimedOut,
            ErrorKind::HostUnreachable,
            ErrorKind::NetworkUnreachable,
        ] {
            assert!(matches!(
                next(Verdict::Inconclusive(kind), true, 3),
                Next::Reopen(_)
            ));
        }
        // Reopening a port that keeps accepting backs off, and is capped.
        assert_eq!(next(Verdict::Alive, true, 30), Next::Reopen(REOPEN.cap));
    }
}
