//! The leader's view of its etcd lease.
//!
//! Invariant: a leader whose last successful renewal is older than 2/3 of
//! the TTL stops dispatching and committing at once, before etcd can give
//! the lease's election to anyone else. The renewal time recorded is when
//! the keep-alive *request* was sent, so the check errs on the safe side.
//! `Instant` is monotonic and keeps counting while the process is paused,
//! so a leader resumed after SIGSTOP sees at once that its lease is stale.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// True while a lease renewed at `last` is safely alive at `now`.
pub fn is_fresh(last: Instant, now: Instant, ttl: Duration) -> bool {
    now.saturating_duration_since(last) < ttl * 2 / 3
}

#[derive(Debug)]
pub struct LeaseClock {
    ttl: Duration,
    last_renewal: Mutex<Instant>,
    /// Set when the leader gives the lease up (SIGTERM): from then on it
    /// counts as stale, whatever the renewals say.
    resigned: AtomicBool,
    /// Cancelled by [`LeaseClock::resign`], before the resign reaches etcd:
    /// the standbys' streams hear of the handover first.
    resigning: CancellationToken,
}

impl LeaseClock {
    pub fn new(ttl: Duration, granted_at: Instant) -> Self {
        LeaseClock {
            ttl,
            last_renewal: Mutex::new(granted_at),
            resigned: AtomicBool::new(false),
            resigning: CancellationToken::new(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Records a renewal whose request was sent at `sent`.
    pub fn renewed(&self, sent: Instant) {
        let mut last = self.last_renewal.lock().expect("lease clock lock poisoned");
        *last = (*last).max(sent);
    }

    /// Gives the lease up: [`LeaseClock::fresh`] is false from now on.
    pub fn resign(&self) {
        self.resigned.store(true, Ordering::SeqCst);
        self.resigning.cancel();
    }

    /// Cancelled once the leader gives the lease up.
    pub fn resigning(&self) -> CancellationToken {
        self.resigning.clone()
    }

    pub fn is_resigned(&self) -> bool {
        self.resigned.load(Ordering::SeqCst)
    }

    /// Time since the last renewal's request was sent.
    pub fn age(&self) -> Duration {
        let last = self.last_renewal.lock().expect("lease clock lock poisoned");
        last.elapsed()
    }

    pub fn fresh(&self) -> bool {
        if self.is_resigned() {
            return false;
        }
        let last = self.last_renewal.lock().expect("lease clock lock poisoned");
        is_fresh(*last, Instant::now(), self.ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_after_two_thirds_of_the_ttl() {
        let t0 = Instant::now();
        let ttl = Duration::from_millis(3000);
        assert!(is_fresh(t0, t0, ttl));
        assert!(is_fresh(t0, t0 + Duration::from_millis(1999), ttl));
        assert!(!is_fresh(t0, t0 + Duration::from_millis(2000), ttl));
        assert!(!is_fresh(t0, t0 + Duration::from_secs(60), ttl));
    }

    #[test]
    fn a_resigned_lease_is_never_fresh() {
        let clock = LeaseClock::new(Duration::from_secs(3), Instant::now());
        assert!(clock.fresh());
        clock.resign();
        clock.renewed(Instant::now());
        assert!(!clock.fresh());
    }

    #[test]
    fn renewals_never_move_backwards() {
        let t0 = Instant::now();
        let clock = LeaseClock::new(Duration::from_secs(3), t0 + Duration::from_secs(1));
        clock.renewed(t0);
        assert_eq!(
            *clock.last_renewal.lock().unwrap(),
            t0 + Duration::from_secs(1)
        );
    }
}
