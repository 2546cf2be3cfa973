//! Leader election through etcd.
//!
//! ```text
//!  connect ─► grant lease (TTL) ─► keep-alive every TTL/3 ─────────────────┐
//!     │                                                                    │
//!     └─► campaign(/sluice/<cluster>/leader, advertise, lease)             │
//!           │  (standby meanwhile: UNAVAILABLE + the leader's address)     │
//!           ▼                                                              │
//!         leader, epoch = leader key revision ─► Term                      │
//!           │  watchdog: no renewal within 2/3 TTL ─► step down ◄──────────┘
//!           │  SIGTERM ─► stop the term ─► resign ─► revoke ─► exit
//!           ▼
//!         step down ─► cancel the term ─► campaign again with a new lease
//! ```
//!
//! etcd unreachable: retry with backoff and log why; never crash-loop.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, LeaderKey};
use sluice_common::backoff::Backoff;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::begin;
use super::detect::Detector;
use super::leadership::{ETCD_DEADLINE, Leadership, etcd_error, within};
use super::lease::LeaseClock;
use super::takeover::{Seen, count_takeover};
use crate::config::ElectionConfig;
use crate::error::DriverError;
use crate::state::{Driver, Role, Term};

/// Between etcd sessions that failed: 100 ms doubling, at most 1 s.
const SESSION_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));

/// Campaigns until `cancel` fires, leading whenever elected.
pub async fn run(
    driver: Arc<Driver>,
    cfg: ElectionConfig,
    cancel: CancellationToken,
) -> Result<(), DriverError> {
    driver.set_role(Role::standby());
    let mut failures = 0u32;
    // Leases of ended sessions whose revoke has not succeeded yet.
    let mut stale_leases: Vec<i64> = Vec::new();
    while !cancel.is_cancelled() {
        let started = Instant::now();
        match session(&driver, &cfg, &cancel, &mut stale_leases).await {
            Ok(()) => break,
            Err(e) => {
                driver.set_role(Role::standby());
                // A session that lasted a while was a success: start over.
                if started.elapsed() > cfg.lease_ttl * 5 {
                    failures = 0;
                }
                let delay = SESSION_BACKOFF.delay(failures);
                warn!(error = %e, retry_ms = delay.as_millis() as u64, "etcd session ended; retrying");
                failures += 1;
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    Ok(())
}

/// One lease: campaign, lead, and end by shutdown (`Ok`) or by losing it.
async fn session(
    driver: &Arc<Driver>,
    cfg: &ElectionConfig,
    cancel: &CancellationToken,
    stale_leases: &mut Vec<i64>,
) -> Result<(), DriverError> {
    let ttl = cfg.lease_ttl;
    let name = cfg.election_name();
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_keep_alive(ttl / 3, ttl / 3)
        .with_require_leader(true);
    // Read again on every session, so that rotated files apply.
    if let Some(tls) = cfg.tls.config().map_err(DriverError::Common)? {
        opts = opts.with_tls(tls);
    }
    if let Some((user, password)) = &cfg.user {
        opts = opts.with_user(user.clone(), password.0.clone());
    }
    let mut client = within(ttl, Client::connect(&cfg.endpoints, Some(opts))).await?;
    // An old lease's candidate key would block the election until the lease
    // expires, which etcd extends when it restarts: revoke it first.
    revoke_all(&mut client, stale_leases, ttl).await?;
    let granted_at = Instant::now();
    let lease = within(ttl, client.lease_grant(cfg.ttl_secs(), None)).await?;
    let lease_id = lease.id();
    stale_leases.push(lease_id);
    let clock = Arc::new(LeaseClock::new(ttl, granted_at));
    let session = cancel.child_token();
    let _stop_session = session.clone().drop_guard();
    let mut keeper = tokio::spawn(keep_alive(
        client.clone(),
        lease_id,
        clock.clone(),
        session.clone(),
    ));
    let (seen_tx, seen) = watch::channel(None);
    let hints = tokio::spawn(watch_leader(
        client.clone(),
        name.clone(),
        driver.clone(),
        seen_tx,
        session.clone(),
    ));
    let (observed_tx, observed) = watch::channel(None);
    let detecting = session.child_token();
    let detector = Detector {
        client: client.clone(),
        election: name.clone(),
        driver: driver.clone(),
        revoke: cfg.fast_failover,
        seen,
        observed: observed_tx,
    };
    tokio::spawn(detector.run(detecting.clone()));
    info!(lease = lease_id, ttl_ms = ttl.as_millis() as u64, election = %name, "campaigning");

    // The one etcd call without a fixed deadline: a campaign waits, by
    // design, until this candidate is elected. It is bounded by the session
    // instead: shutdown, a lost lease or an overdue renewal (checked every
    // TTL/10 below) drops it.
    let mut campaign_client = client.clone();
    let value = super::value::election_value(
        &driver.config.advertise,
        driver.config.http_advertise.as_deref(),
    );
    let campaign = campaign_client.campaign(name.as_str(), value, lease_id);
    tokio::pin!(campaign);
    let mut tick = tokio::time::interval(ttl / 10);
    let leader_key: LeaderKey = loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                if let Err(e) = revoke_all(&mut client, stale_leases, ttl).await {
                    warn!(error = %e, "cannot revoke this driver's leases; they expire after their TTL");
                }
                return Ok(());
            }
            r = &mut keeper => return Err(lease_lost(r)),
            _ = tick.tick() => {
                if !clock.fresh() {
                    return Err(DriverError::Internal("lease renewal overdue while campaigning".into()));
                }
            }
            r = &mut campaign => {
                let mut resp = r.map_err(etcd_error)?;
                break resp.take_leader().ok_or_else(|| DriverError::Internal("campaign returned no leader key".into()))?;
            }
        }
    };
    hints.abort();

    let epoch = leader_key.rev() as u64;
    tokio::spawn(count_takeover(
        observed,
        driver.metrics.clone(),
        epoch,
        detecting,
    ));
    let leadership = Leadership::elected(client.clone(), name.clone(), clock.clone());
    // Not a child of the shutdown token: on SIGTERM the term first stops
    // committing (the lease is marked resigned), then resigns, and only then
    // closes the executors' streams, so that they find the new leader at once.
    let term = Term::new(epoch, driver, CancellationToken::new(), leadership);
    let _end_term = term.cancel.clone().drop_guard();
    info!(epoch, driver = %driver.config.id, advertise = %driver.config.advertise, "elected leader");
    begin(driver, &term).await?;

    let outcome = loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break None,
            r = &mut keeper => break Some(lease_lost(r)),
            _ = term.cancel.cancelled() => break Some(DriverError::Deposed { epoch }),
            _ = tick.tick() => {
                if !clock.fresh() {
                    break Some(DriverError::Internal("lease renewal overdue".into()));
                }
            }
        }
    };
    match outcome {
        None => {
            // Stop dispatching and committing before anything else.
            clock.resign();
            let resign = etcd_client::ResignOptions::new().with_leader(leader_key);
            let resigned = within(ttl, client.resign(Some(resign))).await;
            term.cancel.cancel();
            driver.set_role(Role::standby());
            if let Err(e) = revoke_all(&mut client, stale_leases, ttl).await {
                warn!(error = %e, "cannot revoke this driver's leases; they expire after their TTL");
            }
            info!(
                epoch,
                resigned = resigned.is_ok(),
                "resigned the leadership"
            );
            term.shutdown().await;
            Ok(())
        }
        Some(e) => {
            // Stop dispatching and committing before anything else.
            term.cancel.cancel();
            driver.set_role(Role::standby());
            warn!(epoch, error = %e, "stepping down");
            term.shutdown().await;
            Err(e)
        }
    }
}

/// Revokes every lease in `leases`, keeping those whose revoke failed. A
/// lease etcd no longer knows counts as revoked.
async fn revoke_all(
    client: &mut Client,
    leases: &mut Vec<i64>,
    ttl: Duration,
) -> Result<(), DriverError> {
    let mut failed = None;
    let mut kept = Vec::new();
    for id in leases.drain(..) {
        match tokio::time::timeout(ttl, client.lease_revoke(id)).await {
            Ok(Ok(_)) => {}
            Ok(Err(etcd_client::Error::GRpcStatus(s))) if s.code() == tonic::Code::NotFound => {}
            Ok(Err(e)) => {
                kept.push(id);
                failed = Some(etcd_error(e));
            }
            Err(_) => {
                kept.push(id);
                failed = Some(DriverError::Election(
                    format!("etcd did not revoke lease {id:x} within {ttl:?}").into(),
                ));
            }
        }
    }
    *leases = kept;
    failed.map_or(Ok(()), Err)
}

fn lease_lost(r: Result<DriverError, tokio::task::JoinError>) -> DriverError {
    r.unwrap_or_else(|e| DriverError::Internal(format!("lease keeper failed: {e}")))
}

/// Renews the lease every TTL/3, reopening the keep-alive stream when it
/// breaks. Returns only when the lease is gone (or the session ends).
async fn keep_alive(
    mut client: Client,
    lease_id: i64,
    clock: Arc<LeaseClock>,
    cancel: CancellationToken,
) -> DriverError {
    let period = clock.ttl() / 3;
    loop {
        let opened = tokio::select! {
            biased;
            _ = cancel.cancelled() => return DriverError::Cancelled,
            r = within(ETCD_DEADLINE, client.lease_keep_alive(lease_id)) => r,
        };
        let (mut keeper, mut stream) = match opened {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, lease = lease_id, "cannot open the lease keep-alive stream");
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return DriverError::Cancelled,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let mut sent: VecDeque<Instant> = VecDeque::new();
        let mut tick = tokio::time::interval(period);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return DriverError::Cancelled,
                _ = tick.tick() => {
                    sent.push_back(Instant::now());
                    if within(period, keeper.keep_alive()).await.is_err() {
                        break;
                    }
                }
                m = stream.message() => match m {
                    Ok(Some(resp)) if resp.ttl() > 0 => {
                        if let Some(at) = sent.pop_front() {
                            clock.renewed(at);
                        }
                    }
                    Ok(Some(_)) => {
                        return DriverError::Internal(format!("lease {lease_id:x} expired"));
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        warn!(lease = lease_id, "lease keep-alive stream broke; reopening");
    }
}

/// While standing by, keeps the leader's address for the `sluice-leader`
/// hint, and tells the detector which term leads.
async fn watch_leader(
    mut client: Client,
    name: String,
    driver: Arc<Driver>,
    seen: watch::Sender<Option<Seen>>,
    cancel: CancellationToken,
) {
    let mut known: Option<(String, Option<String>)> = None;
    let mut failing = false;
    loop {
        let read = tokio::time::timeout(Duration::from_secs(1), client.leader(name.as_str())).await;
        let kv = match read {
            Ok(Ok(mut resp)) => Some(resp.take_kv()),
            Ok(Err(e)) if is_no_leader(&e) => Some(None),
            // Not knowing is not "no leader": keep what was last seen.
            Ok(Err(e)) => {
                if !failing {
                    warn!(error = %e, "cannot read the election's leader; keeping the last one seen");
                }
                None
            }
            Err(_) => {
                if !failing {
                    warn!("etcd did not say who leads within 1s; keeping the last one seen");
                }
                None
            }
        };
        failing = kv.is_none();
        if let Some(kv) = kv {
            publish_leader(kv, &driver, &seen, &mut known);
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// True when etcd's answer is that the election has no leader (its
/// `ErrElectionNoLeader`), rather than a failure to answer.
fn is_no_leader(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("election: no leader"))
}

/// Tells the driver's role and the failure detector who leads now, per
/// the election's key `kv` (`None`: nobody).
fn publish_leader(
    kv: Option<etcd_client::KeyValue>,
    driver: &Driver,
    seen: &watch::Sender<Option<Seen>>,
    known: &mut Option<(String, Option<String>)>,
) {
    let leader = kv
        .as_ref()
        .and_then(|kv| kv.value_str().ok())
        .map(super::value::parse_election_value);
    let term = kv
        .as_ref()
        .zip(leader.as_ref())
        .map(|(kv, (grpc, _))| Seen {
            epoch: kv.create_revision() as u64,
            lease: kv.lease(),
            grpc: grpc.clone(),
        });
    seen.send_if_modified(|s| {
        let changed = *s != term;
        if changed {
            s.clone_from(&term);
        }
        changed
    });
    if leader != *known && !driver.is_leader() {
        let (grpc, ui) = leader.clone().unzip();
        driver.set_role(Role::Standby {
            leader: grpc,
            leader_ui: ui.flatten(),
        });
        *known = leader;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_etcds_no_leader_answer_means_nobody_leads() {
        let no_leader = tonic::Status::failed_precondition("etcdserver: election: no leader");
        assert!(is_no_leader(&etcd_client::Error::GRpcStatus(no_leader)));
        let down = tonic::Status::unavailable("etcdserver: request timed out");
        assert!(!is_no_leader(&etcd_client::Error::GRpcStatus(down)));
        assert!(!is_no_leader(&etcd_client::Error::InvalidArgs("x".into())));
    }
}
