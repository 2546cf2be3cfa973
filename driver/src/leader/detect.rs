//! A standby's watch on the leader's process: fast failover.
//!
//! ```text
//!  leader key in etcd ─► Seen{epoch, lease, grpc} ─► resolve ─► WatchTerm stream
//!                                                                  │
//!      TermEvent{ending}: the term ended, the process lives ◄──────┤
//!      (a resign or a step-down: the election decides)             │
//!                                                                  ▼ reset / EOF
//!                                     probe ×3, 20 ms apart (probe.rs)
//!                     Alive ─► reopen │ Inconclusive ─► lease decides, reopen later
//!                                     ▼ Dead (every attempt refused)
//!                  the key still holds that epoch and lease? ─► lease_revoke
//!                  (etcd deletes the leader key; the oldest pending campaign wins)
//! ```
//!
//! Invariants, enforced here:
//! - Only this standby's own evidence counts: its stream broke, and then the
//!   leader's port refused every connection attempt. A timeout or an
//!   unreachable host never leads to a revoke.
//! - Only the lease of the term that was watched is revoked, and only while
//!   the leader key still carries that term's revision and lease.
//! - Nothing here writes a checkpoint: a wrong revoke costs a needless
//!   election, never output (see `docs/design-notes.md`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;
use sluice_proto as pb;
use sluice_proto::peer_service_client::PeerServiceClient;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tracing::{debug, info, warn};

use super::leadership::{ETCD_DEADLINE, within};
use super::probe::{self, Evidence, Verdict};
use super::takeover::{End, Next, Observed, REOPEN, Seen, next};
use crate::failpoint::{self, Point};
use crate::state::Driver;

/// How long a new stream may take to open.
const OPEN_TIMEOUT: Duration = Duration::from_millis(500);
/// HTTP/2 pings on the stream: a connection that stops answering (a
/// partition, a dropped route) breaks the stream within about 2 s; the
/// probe then finds it inconclusive.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// One standby's detector. Owns nothing but its stream; the etcd client
/// is shared with the session.
pub struct Detector {
    pub client: Client,
    pub election: String,
    pub driver: Arc<Driver>,
    /// False: watch only, for the cause; the lease decides (`--fast-failover false`).
    pub revoke: bool,
    pub seen: watch::Receiver<Option<Seen>>,
    pub observed: watch::Sender<Option<Observed>>,
}

/// Why following one leader stopped.
enum Stop {
    Cancelled,
    /// The election shows another leader (or none): look again.
    LeaderChanged,
}

impl Detector {
    /// Follows each leader the election shows until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let leader = self.seen.borrow_and_update().clone();
            let own = &self.driver.config.advertise;
            if let Some(leader) = leader.filter(|l| &l.grpc != own) {
                self.observed.send_if_modified(|o| {
                    let new = o.is_none_or(|o| o.epoch != leader.epoch);
                    if new {
                        *o = Some(Observed {
                            epoch: leader.epoch,
                            end: None,
                        });
                    }
                    new
                });
                if let Stop::Cancelled = self.follow(&leader, &cancel).await {
                    break;
                }
                continue;
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                r = self.seen.changed() => if r.is_err() { break },
            }
        }
        self.driver.metrics.fast_failover_armed.set(0);
    }

    /// Watches `leader` until the election shows another one, or until its
    /// process is found gone and its lease revoked.
    async fn follow(&mut self, leader: &Seen, cancel: &CancellationToken) -> Stop {
        let mut failures = 0u32;
        loop {
            let Some(addr) = self.resolve(&leader.grpc).await else {
                match self.pause(REOPEN.cap, cancel).await {
                    Paused::Elapsed => continue,
                    Paused::Stop(stop) => return stop,
                }
            };
            let broke_at = match self.watch_stream(leader, addr, cancel).await {
                Watched::Broke(at) => at,
                Watched::Ended(end) => {
                    self.ended(leader.epoch, end);
                    return self.until_changed(cancel).await;
                }
                Watched::Stop(stop) => return stop,
                Watched::Triggered => {
                    warn!(
                        epoch = leader.epoch,
                        lease = leader.lease,
                        "test hook: revoking the lease of a live leader"
                    );
                    self.revoke(leader, None).await;
                    return self.until_changed(cancel).await;
                }
            };
            let evidence = probe::confirm_dead(addr).await;
            match next(evidence.verdict, self.revoke, failures) {
                Next::Revoke => {
                    let took = broke_at.elapsed();
                    if self.revoke(leader, Some(&evidence)).await {
                        self.driver
                            .metrics
                            .death_detection_seconds
                            .observe(took.as_secs_f64());
                    }
                    return self.until_changed(cancel).await;
                }
                Next::Reopen(pause) => {
                    match evidence.verdict {
                        Verdict::Inconclusive(kind) => info!(
                            epoch = leader.epoch, addr = %addr, answer = ?kind,
                            "the stream to the leader broke, but its port did not refuse: \
                             leaving the decision to its lease"
                        ),
                        v => {
                            debug!(epoch = leader.epoch, addr = %addr, verdict = ?v, "reopening the stream to the leader")
                        }
                    }
                    failures = failures.saturating_add(1);
                    if let Paused::Stop(stop) = self.pause(pause, cancel).await {
                        return stop;
                    }
                }
            }
        }
    }

    async fn resolve(&self, grpc: &str) -> Option<SocketAddr> {
        match tokio::time::timeout(OPEN_TIMEOUT, tokio::net::lookup_host(grpc)).await {
            Ok(Ok(mut addrs)) => addrs.next(),
            Ok(Err(e)) => {
                debug!(leader = %grpc, error = %e, "cannot resolve the leader's address");
                None
            }
            Err(_) => None,
        }
    }

    fn ended(&self, epoch: u64, end: End) {
        self.driver.metrics.fast_failover_armed.set(0);
        self.observed.send_modify(|o| {
            if let Some(o) = o.as_mut().filter(|o| o.epoch == epoch) {
                o.end.get_or_insert(end);
            }
        });
    }

    /// Sleeps `pause`, unless the election changes first.
    async fn pause(&mut self, pause: Duration, cancel: &CancellationToken) -> Paused {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Paused::Stop(Stop::Cancelled),
            r = self.seen.changed() => Paused::Stop(if r.is_err() { Stop::Cancelled } else { Stop::LeaderChanged }),
            _ = tokio::time::sleep(pause) => Paused::Elapsed,
        }
    }

    async fn until_changed(&mut self, cancel: &CancellationToken) -> Stop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Stop::Cancelled,
            r = self.seen.changed() => if r.is_err() { Stop::Cancelled } else { Stop::LeaderChanged },
        }
    }
}

enum Paused {
    Elapsed,
    Stop(Stop),
}

/// How a stream to the leader went.
enum Watched {
    /// Reset, closed without a last event, or never opened: probe.
    Broke(Instant),
    /// The leader said its term ended.
    Ended(End),
    Stop(Stop),
    /// The failpoint `revoke-live-leader` fired.
    Triggered,
}

impl Detector {
    async fn watch_stream(
        &mut self,
        leader: &Seen,
        addr: SocketAddr,
        cancel: &CancellationToken,
    ) -> Watched {
        let metrics = self.driver.metrics.clone();
        let mut stream = match self.open(addr).await {
            Ok(s) => s,
            Err(e) => {
                debug!(epoch = leader.epoch, addr = %addr, error = %e, "cannot open the stream to the leader");
                return Watched::Broke(Instant::now());
            }
        };
        metrics.fast_failover_armed.set(i64::from(self.revoke));
        let outcome = loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break Watched::Stop(Stop::Cancelled),
                r = self.seen.changed() => {
                    let same = self.seen.borrow().as_ref().is_some_and(|s| s == leader);
                    if r.is_err() { break Watched::Stop(Stop::Cancelled) }
                    if !same { break Watched::Stop(Stop::LeaderChanged) }
                }
                () = failpoint::fire(Point::RevokeLiveLeader, leader.epoch) => break Watched::Triggered,
                m = stream.message() => match m {
                    Ok(Some(ev)) if ev.ending => {
                        break Watched::Ended(if ev.resigned { End::Resigned } else { End::Ended });
                    }
                    Ok(Some(ev)) if ev.epoch != leader.epoch => {
                        // Another term answers at that address: the
                        // election will show it.
                        break Watched::Stop(Stop::LeaderChanged);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break Watched::Broke(Instant::now()),
                }
            }
        };
        metrics.fast_failover_armed.set(0);
        outcome
    }

    async fn open(&self, addr: SocketAddr) -> Result<tonic::Streaming<pb::TermEvent>, String> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(OPEN_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true);
        let request = pb::WatchTermRequest {
            driver_id: self.driver.config.id.clone(),
        };
        // The drivers share one setting: a TLS port here means TLS there.
        let tls = self.driver.config.security.tls.is_some();
        let call = async {
            let channel = if tls {
                let config = crate::tls::peer::client_config();
                let connect = tower::service_fn(move |_: http::Uri| {
                    crate::tls::peer::connect(addr, config.clone())
                });
                endpoint.connect_with_connector(connect).await
            } else {
                endpoint.connect().await
            };
            let channel = channel.map_err(|e| e.to_string())?;
            let mut client = PeerServiceClient::new(channel);
            let response = client
                .watch_term(request)
                .await
                .map_err(|s| s.to_string())?;
            Ok::<_, String>(response.into_inner())
        };
        tokio::time::timeout(OPEN_TIMEOUT * 2, call)
            .await
            .map_err(|_| format!("no stream within {:?}", OPEN_TIMEOUT * 2))?
    }

    /// Revokes `leader`'s lease if the leader key still carries it. True
    /// when this standby revoked it.
    async fn revoke(&mut self, leader: &Seen, evidence: Option<&Evidence>) -> bool {
        let current = within(ETCD_DEADLINE, self.client.leader(self.election.as_str()))
            .await
            .ok()
            .and_then(|r| r.kv().map(|kv| (kv.create_revision() as u64, kv.lease())));
        if evidence.is_some() {
            self.ended(leader.epoch, End::Refused);
        }
        if current != Some((leader.epoch, leader.lease)) {
            debug!(
                epoch = leader.epoch,
                ?current,
                "the watched term no longer leads; nothing to revoke"
            );
            return false;
        }
        let revoked = match within(ETCD_DEADLINE, self.client.lease_revoke(leader.lease)).await {
            Ok(_) => true,
            Err(e) => {
                warn!(epoch = leader.epoch, lease = leader.lease, error = %e, "cannot revoke the dead leader's lease; its expiry will do");
                false
            }
        };
        if let Some(e) = evidence {
            let refused_ms: Vec<u64> = e.refused_at.iter().map(|d| d.as_millis() as u64).collect();
            warn!(
                epoch = leader.epoch,
                lease = leader.lease,
                leader = %leader.grpc,
                addr = %e.addr,
                refused_after_ms = ?refused_ms,
                revoked,
                "the leader's process is gone: its stream broke and its port refused every connection; revoked its lease"
            );
        }
        revoked
    }
}
