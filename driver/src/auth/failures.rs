//! Failed authentications, per peer address: a token bucket lets a peer
//! fail [`BURST`] times at once, then [`REFILL_PER_SECOND`] times a second;
//! a peer past it is refused before its credentials are checked, until its
//! bucket refills. Failures are logged aggregated, one line per peer at
//! most every [`LOG_EVERY`], never one line per call.
//!
//! The decisions are pure functions of the state and the time
//! ([`Bucket`]); [`Failures`] holds the state of every peer, bounded to
//! [`MAX_PEERS`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures a peer may have at once.
pub const BURST: f64 = 20.0;
/// Failures a peer may have each second past the burst.
pub const REFILL_PER_SECOND: f64 = 2.0;
/// The least time between two log lines about one peer.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// Peers tracked at once; past it, those whose buckets are full go.
pub const MAX_PEERS: usize = 100_000;

/// One peer's bucket, and what is not logged yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
    failed: u64,
    refused: u64,
    logged: Option<Instant>,
}

/// What to log about a peer: its failures and refusals since the last line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub failed: u64,
    pub refused: u64,
}

impl Bucket {
    pub fn new(now: Instant) -> Self {
        Bucket {
            tokens: BURST,
            at: now,
            failed: 0,
            refused: 0,
            logged: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + secs * REFILL_PER_SECOND).min(BURST);
        self.at = now;
    }

    /// Whether the peer may present credentials at `now`; a refusal counts.
    pub fn admits(&mut self, now: Instant) -> bool {
        self.refill(now);
        let admitted = self.tokens >= 1.0;
        if !admitted {
            self.refused += 1;
        }
        admitted
    }

    /// Counts a failure at `now`; the summary to log when one is due.
    pub fn failed(&mut self, now: Instant) -> Option<Summary> {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(0.0);
        self.failed += 1;
        let due = self
            .logged
            .is_none_or(|l| now.saturating_duration_since(l) >= LOG_EVERY);
        if !due {
            return None;
        }
        self.logged = Some(now);
        let summary = Summary {
            failed: self.failed,
            refused: self.refused,
        };
        (self.failed, self.refused) = (0, 0);
        Some(summary)
    }

    fn idle(&self, now: Instant) -> bool {
        let mut b = *self;
        b.refill(now);
        b.tokens >= BURST
    }
}

/// The buckets of every peer that failed lately (`None`: a peer whose
/// address is unknown).
#[derive(Debug, Default)]
pub struct Failures {
    peers: Mutex<HashMap<Option<IpAddr>, Bucket>>,
}

impl Failures {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<IpAddr>, Bucket>> {
        self.peers.lock().expect("auth failures lock poisoned")
    }

    /// Whether `peer` may present credentials now.
    pub fn admits(&self, peer: Option<IpAddr>, now: Instant) -> bool {
        match self.lock().get_mut(&peer) {
            Some(b) => b.admits(now),
            None => true,
        }
    }

    /// Counts a failed authentication of `peer`, and logs the peer's
    /// failures when a line is due.
    pub fn failed(&self, peer: Option<IpAddr>, now: Instant, what: &str) {
        let mut peers = self.lock();
        if peers.len() >= MAX_PEERS {
            peers.retain(|_, b| !b.idle(now));
        }
        let summary = peers
            .entry(peer)
            .or_insert_with(|| Bucket::new(now))
            .failed(now);
        drop(peers);
        if let Some(s) = summary {
            tracing::warn!(
                peer = ?peer,
                failed = s.failed,
                refused = s.refused,
                what,
                "failed authentications from one peer (one line per peer every 10 s at most)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_fails_a_burst_then_waits_for_its_bucket() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        for _ in 0..BURST as usize {
            assert!(b.admits(t0));
            b.failed(t0);
        }
        assert!(!b.admits(t0), "past the burst");
        assert!(!b.admits(t0 + Duration::from_millis(100)));
        assert!(b.admits(t0 + Duration::from_millis(500)), "one refilled");
    }

    #[test]
    fn failures_are_logged_at_most_every_ten_seconds_with_their_counts() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        let first = b.failed(t0);
        assert_eq!(
            first,
            Some(Summary {
                failed: 1,
                refused: 0
            })
        );
        for i in 0..100 {
            let now = t0 + Duration::from_millis(i);
            if !b.admits(now) {
                continue;
            }
            assert_eq!(b.failed(now), None);
        }
        let later = b.failed(t0 + LOG_EVERY).expect("a line is due");
        assert!(later.failed > 1 && later.refused > 0, "{later:?}");
    }

    #[test]
    fn only_peers_that_failed_are_tracked() {
        let f = Failures::default();
        let t0 = Instant::now();
        let a: Option<IpAddr> = Some([10, 0, 0, 1].into());
        let b: Option<IpAddr> = Some([10, 0, 0, 2].into());
        for _ in 0..BURST as usize {
            f.failed(a, t0, "test");
        }
        assert!(!f.admits(a, t0));
        assert!(f.admits(b, t0), "another peer is not slowed");
    }
}
