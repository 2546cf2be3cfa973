//! The connection loop: which driver to dial, how long to wait, and when to
//! give up (never, except on shutdown).
//!
//! ```text
//!            ┌──────────────────────────────────────────────┐
//!            ▼                                              │
//!   pick target (leader hint first, else drivers[i])        │
//!            │ connect (1 s timeout, HTTP/2 keepalive)      │
//!            ▼                                              │
//!   session::run ── Drained ──► return Ok                   │
//!            │ Lost / connect error                         │
//!            ▼                                              │
//!   UNAVAILABLE + `sluice-leader`? ─yes─► follow it (once at once)
//!            │ no: rotate to drivers[i+1]                   │
//!            ▼                                              │
//!   sleep backoff (50 ms, 100 ms, capped at 200 ms) ────────┘
//! ```
//!
//! The target rotation, the hint parsing and the backoff schedule are pure
//! and unit-tested; only [`connect`] and [`serve`] do I/O.

use std::sync::Arc;
use std::time::Duration;

use sluice_common::backoff::Backoff;
use sluice_proto::cluster_service_client::ClusterServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tracing::{error, info, warn};

use crate::Shared;
use crate::config::{ExecutorConfig, normalize_address};
use crate::error::ExecutorError;
use crate::session::{self, Client, SessionEnd};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// A driver that answers no ping for this long (e.g. a paused leader) is
/// dropped, and the executor looks for the current leader.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);
/// After a failure: 50 ms doubling, at most 200 ms, so that a failover
/// is noticed quickly; retries happen only while no driver answers.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(200));

/// The delay before attempt number `failures + 1`, after `failures`
/// consecutive failures: 0, then [`BACKOFF`].
fn backoff(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => BACKOFF.delay(n - 1),
    }
}

/// The delay before the next attempt. A fresh leader hint is followed at
/// once; a chain of hints (standbys pointing at each other) backs off.
pub fn next_delay(failures: u32, redirect_streak: u32) -> Duration {
    if redirect_streak == 1 {
        Duration::ZERO
    } else {
        backoff(failures)
    }
}

/// The leader address a standby put in an `UNAVAILABLE` status, as a URL
/// with this executor's scheme.
fn leader_url(status: &tonic::Status, scheme: &str) -> Option<String> {
    normalize_address(&sluice_proto::leader_hint(status)?, scheme).ok()
}

/// The driver addresses to try, in order, plus a pending leader hint.
#[derive(Debug, Clone)]
pub struct Targets {
    drivers: Vec<String>,
    index: usize,
    redirect: Option<String>,
}

impl Targets {
    /// Starts with the first of `drivers` (which must not be empty).
    pub fn new(drivers: Vec<String>) -> Self {
        Targets {
            drivers,
            index: 0,
            redirect: None,
        }
    }

    /// The address to dial next.
    pub fn current(&self) -> String {
        match &self.redirect {
            Some(r) => r.clone(),
            None => self.drivers.get(self.index).cloned().unwrap_or_default(),
        }
    }

    /// Records a failed attempt: follow `hint` next, or else rotate.
    pub fn failed(&mut self, hint: Option<String>) {
        let followed = self.redirect.take();
        match hint {
            Some(h) => self.redirect = Some(h),
            // A failed redirect falls back to the list where it left off.
            None if followed.is_some() => {}
            None => self.index = (self.index + 1) % self.drivers.len().max(1),
        }
    }
}

/// Opens a channel to one driver and wraps it in a client.
pub async fn connect(addr: &str, config: &ExecutorConfig) -> Result<Client, ExecutorError> {
    let to_err = |source| ExecutorError::Connect {
        addr: addr.to_string(),
        source,
    };
    let endpoint = Endpoint::from_shared(addr.to_string()).map_err(to_err)?;
    let endpoint = config
        .tls
        .apply(endpoint)
        .map_err(|e| ExecutorError::Config(e.to_string()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    let channel = endpoint.connect().await.map_err(to_err)?;
    Ok(ClusterServiceClient::with_interceptor(
        channel,
        config.token.clone(),
    ))
}

/// Attaches to a driver again and again until `shutdown`.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<(), ExecutorError> {
    let mut targets = Targets::new(shared.config.drivers.clone());
    let mut failures = 0u32;
    let mut redirect_streak = 0u32;
    loop {
        let addr = targets.current();
        let connected = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            r = connect(&addr, &shared.config) => r,
        };
        let (err, welcomed) = match connected {
            Err(e) => (e, false),
            Ok(client) => match session::run(&shared, &addr, client, &shutdown).await {
                SessionEnd::Drained => return Ok(()),
                SessionEnd::Lost { welcomed, error } => (error, welcomed),
            },
        };
        if shutdown.is_cancelled() {
            return Ok(());
        }
        // The driver keeps one process per executor id, the newest: an
        // older one is told so once, and stops instead of fighting back.
        if let Some(s) = err.status()
            && s.code() == tonic::Code::FailedPrecondition
        {
            error!(executor = %shared.config.id, driver = %addr, reason = %s.message(),
                "another process uses this executor id; stopping");
            return Err(ExecutorError::Replaced(format!(
                "driver {addr}: {}",
                s.message()
            )));
        }
        if welcomed {
            // A session that worked ended (say, a leader handing over): try
            // the next driver at once.
            failures = 0;
            redirect_streak = 0;
        } else {
            failures = failures.saturating_add(1);
        }
        let hint = err
            .status()
            .and_then(|s| leader_url(s, shared.config.tls.scheme()));
        redirect_streak = match hint {
            Some(_) => redirect_streak.saturating_add(1),
            None => 0,
        };
        targets.failed(hint.clone());
        let delay = next_delay(failures, redirect_streak);
        if hint.is_some() {
            info!(driver = %addr, leader = %targets.current(), "following leader hint");
        } else {
            warn!(
                driver = %addr,
                error = %err,
                retryable = err.is_retryable(),
                failures,
                next = %targets.current(),
                delay_ms = delay.as_millis() as u64,
                "driver connection failed; reconnecting"
            );
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let ms: Vec<u128> = (0..8).map(|f| backoff(f).as_millis()).collect();
        assert_eq!(ms, vec![0, 50, 100, 200, 200, 200, 200, 200]);
        assert_eq!(backoff(u32::MAX), Duration::from_millis(200));
    }

    #[test]
    fn a_fresh_hint_is_followed_at_once_but_chains_back_off() {
        assert_eq!(next_delay(3, 1), Duration::ZERO);
        assert_eq!(next_delay(3, 2), backoff(3));
        assert_eq!(next_delay(3, 0), backoff(3));
    }

    #[test]
    fn targets_rotate_and_follow_hints() {
        let mut t = Targets::new(vec!["http://a:1".into(), "http://b:1".into()]);
        assert_eq!(t.current(), "http://a:1");
        t.failed(None);
        assert_eq!(t.current(), "http://b:1");
        t.failed(Some("http://leader:1".into()));
        assert_eq!(t.current(), "http://leader:1");
        // The leader fails too: back to the list where we were.
        t.failed(None);
        assert_eq!(t.current(), "http://b:1");
        t.failed(None);
        assert_eq!(t.current(), "http://a:1");
    }

    #[test]
    fn a_hint_becomes_the_url_to_dial() {
        let mut s = tonic::Status::unavailable("not the leader");
        assert_eq!(leader_url(&s, "http"), None);
        sluice_proto::set_leader_hint(&mut s, "10.0.0.2:7070");
        assert_eq!(
            leader_url(&s, "http").as_deref(),
            Some("http://10.0.0.2:7070")
        );
        assert_eq!(
            leader_url(&s, "https").as_deref(),
            Some("https://10.0.0.2:7070")
        );
    }
}
