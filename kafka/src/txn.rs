//! The second phase of exactly-once into Kafka: the driver ends a
//! transaction a task left open, from another process, by sending `EndTxn`
//! with the identity the task reported ([`TxnId`]) to the transactional
//! id's coordinator over a connection of its own (`wire`).
//!
//! ```text
//!  end_transaction(servers, security, secrets, txn, commit, deadline)
//!    └─ attempt: a bootstrap server ─ [TLS] ─ ApiVersions ─ [SASL] ─ FindCoordinator(txn id)
//!                the coordinator (the same connection when it is that server,
//!                else a new one, secured alike)
//!                  ─ EndTxn(id, producer id, epoch, commit) ─► error code
//!       transient (no answer, coordinator moving or loading, concurrent
//!       transaction): again after a short backoff, until the deadline;
//!       a refused certificate or login: at once, not retryable
//! ```
//!
//! The coordinator checks the transactional id, producer id and epoch, not
//! the connection. Sending the same `EndTxn` again is answered as a retry
//! (error 0); an epoch that a newer producer of the id has passed, or a
//! transaction that is no longer ongoing, is [`TxnEnd::Fenced`].

use std::time::Duration;

use sluice_common::secrets::Secrets;
use sluice_common::spec::{KafkaSecurity, parse_servers};
use tokio::time::Instant;
use tracing::{debug, info};

use std::sync::Arc;

use super::security::{SINK_FIELD, Secured};
use super::wire::{self, Conn, Failure, Stream, Versions, code_name};
use crate::error::{Error, Result};

/// The first pause between attempts; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// A prepared transaction's identity, as a task reports it and the driver
/// records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TxnId {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "transaction {:?} (producer id {}, epoch {})",
            self.transactional_id, self.producer_id, self.producer_epoch
        )
    }
}

/// What the coordinator said of an `EndTxn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    /// The transaction is ended as asked (also when it already was, by an
    /// earlier `EndTxn` of the same kind: a retry).
    Ended,
    /// The id has a newer producer epoch, or no such ongoing transaction:
    /// the transaction was already ended by someone else (aborted by a
    /// newer producer or by its timeout). `code` is the coordinator's: 47
    /// `INVALID_PRODUCER_EPOCH`, 90 `PRODUCER_FENCED` or 48
    /// `INVALID_TXN_STATE`.
    Fenced { code: i16 },
}

/// What an error code of `FindCoordinator` or `EndTxn` means here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// No error.
    Ok,
    /// The transaction was ended by someone else (`EndTxn` only).
    Fenced,
    /// Transient: ask again (the coordinator moved, is loading, is not
    /// available, is completing the id's previous transaction, or timed out).
    Retry,
    /// Anything else: asking again will not help.
    Fail,
}

/// Classifies a coordinator's error code.
pub(super) fn verdict(code: i16) -> Verdict {
    match code {
        0 => Verdict::Ok,
        // INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, PRODUCER_FENCED
        47 | 48 | 90 => Verdict::Fenced,
        // REQUEST_TIMED_OUT, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
        // COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
        7 | 13 | 14 | 15 | 16 | 51 => Verdict::Retry,
        _ => Verdict::Fail,
    }
}

/// How one attempt ended.
enum Attempt {
    Done(TxnEnd),
    /// Worth another attempt within the deadline.
    Transient(String),
    /// Not worth another.
    Failed(String),
}

/// Sends `EndTxn(commit or abort)` for `txn` to its transaction coordinator
/// (`FindCoordinator` via one of `servers`, then a connection to the
/// coordinator), within `deadline` in all. Every connection is secured as
/// `security` says, with the files and variable `secrets` allows (the
/// sink's settings: errors about them name `sink.kafka.security`); the
/// password is read once per call.
///
/// A broker that does not answer, and the coordinator errors that pass
/// (moved, loading, not available, `CONCURRENT_TRANSACTIONS`), are tried
/// again with a short backoff inside the deadline, then returned as a
/// retryable [`Error::Kafka`]. 47 `INVALID_PRODUCER_EPOCH`, 90
/// `PRODUCER_FENCED` and 48 `INVALID_TXN_STATE` are
/// `Ok(TxnEnd::Fenced { code })`; other codes are an [`Error::Kafka`] that
/// is not retryable, naming the code, the transactional id and the servers.
/// So is a refused certificate or SASL login, naming the user and the
/// mechanism, never the password.
pub async fn end_transaction(
    servers: &str,
    security: &KafkaSecurity,
    secrets: &Secrets,
    txn: &TxnId,
    commit: bool,
    deadline: Duration,
) -> Result<TxnEnd> {
    let list = parse_servers(servers).map_err(|r| Error::Config(format!("kafka: {r}")))?;
    let secured = Arc::new(Secured::load_async(security, secrets, SINK_FIELD).await?);
    let started = Instant::now();
    let until = started + deadline;
    let verb = if commit { "commit" } else { "abort" };
    let what = format!("{verb} {txn}");
    let error = |reason: String, retryable: bool| Error::Kafka {
        servers: servers.to_string(),
        what: what.clone(),
        reason,
        retryable,
    };
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        // A server that accepts and never answers costs one attempt, and
        // the next attempt starts at the next server.
        let attempt_until = until.min(Instant::now() + deadline / 2);
        let start = (attempt as usize - 1) % list.len();
        let reason = match attempt_once(&list, start, &secured, txn, commit, attempt_until).await {
            Attempt::Done(end) => {
                let took_ms = started.elapsed().as_secs_f64() * 1e3;
                match end {
                    TxnEnd::Ended => debug!(
                        transactional_id = %txn.transactional_id, producer_id = txn.producer_id,
                        producer_epoch = txn.producer_epoch, commit, attempt, took_ms,
                        "transaction ended"
                    ),
                    TxnEnd::Fenced { code } => info!(
                        transactional_id = %txn.transactional_id, producer_id = txn.producer_id,
                        producer_epoch = txn.producer_epoch, commit, attempt, took_ms,
                        code = %code_name(code),
                        "transaction already ended by someone else"
                    ),
                }
                return Ok(end);
            }
            Attempt::Failed(reason) => return Err(error(reason, false)),
            Attempt::Transient(reason) => reason,
        };
        let left = until.saturating_duration_since(Instant::now());
        if left <= backoff {
            return Err(error(
                format!(
                    "{reason} (after {attempt} attempts in {} ms)",
                    started.elapsed().as_millis()
                ),
                true,
            ));
        }
        debug!(
            transactional_id = %txn.transactional_id, commit, attempt,
            backoff_ms = backoff.as_millis() as u64, %reason,
            "EndTxn not done; trying again"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

impl From<Failure> for Attempt {
    fn from(f: Failure) -> Attempt {
        match f.permanent {
            true => Attempt::Failed(f.reason),
            false => Attempt::Transient(f.reason),
        }
    }
}

/// One try: find the coordinator, send `EndTxn`, classify the answer.
async fn attempt_once(
    servers: &[String],
    start: usize,
    secured: &Arc<Secured>,
    txn: &TxnId,
    commit: bool,
    until: Instant,
) -> Attempt {
    let (mut conn, versions) = match open_any(servers, start, secured, until).await {
        Ok(opened) => opened,
        Err(failure) => return failure.into(),
    };
    let id = &txn.transactional_id;
    let found = match conn
        .find_coordinator(versions.find_coordinator, id, until)
        .await
    {
        Ok(found) => found,
        Err(failure) => return failure.into(),
    };
    let said = |what: &str, code: i16, message: Option<String>| {
        let mut text = format!("{what} answered error {}", code_name(code));
        if let Some(m) = message.filter(|m| !m.is_empty()) {
            text.push_str(&format!(": {m}"));
        }
        text
    };
    match verdict(found.code) {
        Verdict::Ok => {}
        Verdict::Retry => {
            return Attempt::Transient(said("FindCoordinator", found.code, found.message));
        }
        Verdict::Fenced | Verdict::Fail => {
            return Attempt::Failed(said("FindCoordinator", found.code, found.message));
        }
    }
    let coordinator = found.addr();
    let mut versions = versions;
    if coordinator != conn.peer() {
        (conn, versions) = match open(&coordinator, secured, until).await {
            Ok(opened) => opened,
            Err(f) => {
                return Failure {
                    reason: format!("the coordinator: {}", f.reason),
                    ..f
                }
                .into();
            }
        };
    }
    let request = wire::end_txn_request(id, txn.producer_id, txn.producer_epoch, commit);
    let code = match conn.end_txn(versions.end_txn, request, until).await {
        Ok(code) => code,
        Err(failure) => return failure.into(),
    };
    let what = format!("EndTxn v{} at coordinator {coordinator}", versions.end_txn);
    match verdict(code) {
        Verdict::Ok => Attempt::Done(TxnEnd::Ended),
        Verdict::Fenced => Attempt::Done(TxnEnd::Fenced { code }),
        Verdict::Retry => Attempt::Transient(said(&what, code, None)),
        Verdict::Fail => Attempt::Failed(said(&what, code, None)),
    }
}

/// A connection to `addr` ready for requests: dialled (with TLS when the
/// settings say), the broker's versions read and chosen, logged in (SASL).
/// A broker that answers but lacks the requests will not grow them: that
/// is permanent.
async fn open(
    addr: &str,
    secured: &Arc<Secured>,
    until: Instant,
) -> std::result::Result<(Conn<Stream>, Versions), Failure> {
    let mut conn = wire::dial(addr, secured, until).await?;
    let ranges = conn.versions(until).await?;
    conn.authenticate(&ranges, until).await?;
    let versions = wire::choose_versions(&ranges).map_err(Failure::permanent)?;
    Ok((conn, versions))
}

/// A connection ([`open`]) to the first of `servers`, from `start` on and
/// around, that accepts one. A permanent failure ends the search: the
/// other servers share the settings it refused.
async fn open_any(
    servers: &[String],
    start: usize,
    secured: &Arc<Secured>,
    until: Instant,
) -> std::result::Result<(Conn<Stream>, Versions), Failure> {
    let mut failures = Vec::new();
    for server in servers.iter().cycle().skip(start).take(servers.len()) {
        match open(server, secured, until).await {
            Ok(opened) => return Ok(opened),
            Err(f) if f.permanent => return Err(f),
            Err(f) => failures.push(f.reason),
        }
    }
    Err(Failure::transient(failures.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_classified() {
        assert_eq!(verdict(0), Verdict::Ok);
        for fenced in [47, 48, 90] {
            assert_eq!(verdict(fenced), Verdict::Fenced, "{fenced}");
        }
        for transient in [7, 13, 14, 15, 16, 51] {
            assert_eq!(verdict(transient), Verdict::Retry, "{transient}");
        }
        // UNKNOWN_SERVER_ERROR, INVALID_PRODUCER_ID_MAPPING,
        // TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a code from the future.
        for fail in [-1, 49, 53, 32000] {
            assert_eq!(verdict(fail), Verdict::Fail, "{fail}");
        }
    }

    #[test]
    fn a_transaction_identity_round_trips_through_json() {
        let txn = TxnId {
            transactional_id: "q-1/sink-0".into(),
            producer_id: 4000,
            producer_epoch: 7,
        };
        let text = serde_json::to_string(&txn).unwrap();
        assert_eq!(serde_json::from_str::<TxnId>(&text).unwrap(), txn);
        assert_eq!(
            txn.to_string(),
            "transaction \"q-1/sink-0\" (producer id 4000, epoch 7)"
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_retryable_and_named_after_the_deadline() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let servers = format!("127.0.0.1:{port}");
        let txn = TxnId {
            transactional_id: "t".into(),
            producer_id: 1,
            producer_epoch: 0,
        };
        let started = std::time::Instant::now();
        let err = end_transaction(
            &servers,
            &KafkaSecurity::default(),
            &Secrets::default(),
            &txn,
            true,
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(err.is_retryable(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&servers) && text.contains("commit transaction \"t\""),
            "{text}"
        );
    }
}
