//! The one gRPC client of the CLI: it owns the driver address list, the
//! connection, failover between addresses, following a standby's
//! `sluice-leader` hint, and retrying retryable failures with backoff until a
//! deadline. Every command goes through [`Client::call`] or
//! [`Client::call_until`]; errors are a typed [`CliError`]. The pure
//! decisions (what is retryable, hint parsing, backoff) are in `retry.rs`.

use std::future::Future;
use std::time::Duration;

use sluice_common::tls::{Bearer, ClientTls};
use sluice_proto::query_service_client::QueryServiceClient;
use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

pub use crate::retry::parse_addrs;
use crate::retry::{BACKOFF, endpoint_uri, is_transport_failure};

/// How long a call keeps retrying by default: long enough for a leader
/// failover (bounded by the lease TTL) or a driver restart.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::from_secs(10);

/// The gRPC client type every command uses; every call carries the token.
pub type Rpc = QueryServiceClient<InterceptedService<Channel, Bearer>>;

/// Errors of the client. [`CliError::is_retryable`] says which ones a retry
/// may cure.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no driver address given (--driver or SLUICE_DRIVER)")]
    NoAddress,
    #[error("{0}")]
    Config(String),
    #[error("invalid driver address {addr:?}: {reason}")]
    BadAddress { addr: String, reason: String },
    #[error("cannot connect to the driver at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// The TLS handshake failed on a certificate: a setting to fix, not a
    /// moment to wait out.
    #[error("cannot connect to the driver at {addr}: {reason}")]
    Tls { addr: String, reason: String },
    #[error("the driver at {addr} is unavailable: {message}")]
    Unavailable {
        addr: String,
        message: String,
        leader: Option<String>,
    },
    #[error("{}", rpc_message(*code, message))]
    Rpc { code: Code, message: String },
    #[error("gave up after {secs:.1} s trying {addrs}: {last}")]
    GaveUp {
        secs: f64,
        addrs: String,
        last: Box<CliError>,
    },
}

impl CliError {
    /// True when the same call may succeed later or on another driver.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CliError::Connect { .. } | CliError::Unavailable { .. }
        )
    }

    /// The gRPC code of a non-retryable server answer, if that is what this is.
    pub fn code(&self) -> Option<Code> {
        match self {
            CliError::Rpc { code, .. } => Some(*code),
            CliError::GaveUp { last, .. } => last.code(),
            _ => None,
        }
    }

    /// Turns a failed call's status into an error, keeping a leader hint.
    pub(crate) fn from_status(addr: &str, status: &Status) -> Self {
        let has_source = std::error::Error::source(status).is_some();
        if is_transport_failure(status.code(), has_source) {
            CliError::Unavailable {
                addr: addr.to_string(),
                message: status.message().to_string(),
                leader: sluice_proto::leader_hint(status),
            }
        } else {
            CliError::Rpc {
                code: status.code(),
                message: status.message().to_string(),
            }
        }
    }
}

fn rpc_message(code: Code, message: &str) -> String {
    if message.is_empty() {
        code.description().to_string()
    } else {
        message.to_string()
    }
}

/// A QueryService client over a list of driver addresses.
pub struct Client {
    addrs: Vec<String>,
    current: usize,
    conn: Option<Rpc>,
    retry_window: Duration,
    tls: ClientTls,
    token: Bearer,
}

impl Client {
    pub fn new(addrs: Vec<String>) -> Result<Self, CliError> {
        if addrs.is_empty() {
            return Err(CliError::NoAddress);
        }
        Ok(Client {
            addrs,
            current: 0,
            conn: None,
            retry_window: DEFAULT_RETRY_WINDOW,
            tls: ClientTls::default(),
            token: Bearer::default(),
        })
    }

    /// Connects over TLS with `tls` and sends `token` with every call.
    pub fn secured(mut self, tls: ClientTls, token: Bearer) -> Self {
        self.tls = tls;
        self.token = token;
        self.conn = None;
        self
    }

    /// The address currently in use.
    pub fn current_addr(&self) -> &str {
        &self.addrs[self.current]
    }

    /// Forgets the connection, so the next call connects again (after a
    /// stream broke, for example).
    pub fn reset(&mut self) {
        self.conn = None;
    }

    /// Runs `f` against the driver, retrying retryable failures for the
    /// default retry window.
    pub async fn call<T, F, Fut>(&mut self, f: F) -> Result<T, CliError>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + self.retry_window;
        self.call_until(Some(deadline), f).await
    }

    /// Runs `f` against the driver, retrying retryable failures until
    /// `deadline` (forever with `None`).
    pub async fn call_until<T, F, Fut>(
        &mut self,
        deadline: Option<Instant>,
        mut f: F,
    ) -> Result<T, CliError>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let started = Instant::now();
        let (mut attempt, mut tried) = (0u32, 0usize);
        loop {
            let err = match self.try_once(&mut f).await {
                Ok(v) => return Ok(v),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            self.conn = None;
            let hinted = match &err {
                CliError::Unavailable {
                    leader: Some(l), ..
                } => self.follow_hint(l),
                _ => false,
            };
            if !hinted {
                self.current = (self.current + 1) % self.addrs.len();
            }
            // A fresh hint or an address not yet tried this round is worth
            // trying at once; a full round of failures backs off.
            tried += 1;
            let delay = if hinted {
                // Short, so that two standbys hinting at each other mid
                // failover cannot spin.
                Duration::from_millis(20)
            } else if tried < self.addrs.len() {
                Duration::ZERO
            } else {
                tried = 0;
                attempt += 1;
                BACKOFF.delay(attempt - 1)
            };
            if deadline.is_some_and(|d| Instant::now() + delay >= d) {
                return Err(CliError::GaveUp {
                    secs: started.elapsed().as_secs_f64(),
                    addrs: self.addrs.join(","),
                    last: Box::new(err),
                });
            }
            tracing::debug!(error = %err, ?delay, "retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn try_once<T, F, Fut>(&mut self, f: &mut F) -> Result<T, CliError>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let rpc = self.connect().await?;
        match f(rpc).await {
            Ok(resp) => Ok(resp.into_inner()),
            Err(status) => Err(CliError::from_status(self.current_addr(), &status)),
        }
    }

    /// Moves to the hinted leader; false if the hint is where we already are.
    fn follow_hint(&mut self, leader: &str) -> bool {
        if self.addrs[self.current] == leader {
            return false;
        }
        match self.addrs.iter().position(|a| a == leader) {
            Some(i) => self.current = i,
            None => {
                self.addrs.push(leader.to_string());
                self.current = self.addrs.len() - 1;
            }
        }
        true
    }

    async fn connect(&mut self) -> Result<Rpc, CliError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let addr = self.current_addr().to_string();
        let endpoint =
            Endpoint::from_shared(endpoint_uri(&addr, self.tls.scheme())).map_err(|e| {
                CliError::BadAddress {
                    addr: addr.clone(),
                    reason: e.to_string(),
                }
            })?;
        let endpoint = self
            .tls
            .apply(endpoint)
            .map_err(|e| CliError::Config(e.to_string()))?
            .connect_timeout(Duration::from_secs(2))
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true);
        let channel = endpoint.connect().await.map_err(|e| {
            let reason = connect_reason(&e, self.tls.enabled());
            if self.tls.enabled() && reason.contains("invalid peer certificate") {
                CliError::Tls {
                    addr: addr.clone(),
                    reason,
                }
            } else {
                CliError::Connect {
                    addr: addr.clone(),
                    reason,
                }
            }
        })?;
        let rpc = QueryServiceClient::with_interceptor(channel, self.token.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        self.conn = Some(rpc.clone());
        Ok(rpc)
    }
}

/// Why a connection failed, with a hint when TLS is the likely cause.
fn connect_reason(e: &dyn std::error::Error, tls: bool) -> String {
    let chain = sluice_common::error::chain(e);
    let lower = chain.to_ascii_lowercase();
    if tls && lower.contains("certificate expired") {
        return format!(
            "{chain} (TLS: the driver's certificate has expired: renew it; the driver reloads it)"
        );
    }
    if tls
        && (lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake"))
    {
        format!("{chain} (TLS: check --tls-ca, and that the driver's certificate names this host)")
    } else if !tls
        && (lower.contains("connection reset")
            || lower.contains("frame with invalid size")
            || lower.contains("broken pipe")
            || lower.contains("connection closed"))
    {
        format!("{chain} (does the driver use TLS? then pass --tls-ca)")
    } else {
        chain
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::LEADER_METADATA_KEY;
    use tonic::metadata::MetadataMap;

    #[test]
    fn unavailable_with_hint_is_retryable_and_keeps_the_leader() {
        let mut md = MetadataMap::new();
        md.insert(LEADER_METADATA_KEY, "b:1".parse().unwrap());
        let status = Status::with_metadata(Code::Unavailable, "not the leader", md);
        let err = CliError::from_status("a:1", &status);
        assert!(err.is_retryable());
        assert!(matches!(err, CliError::Unavailable { leader: Some(ref l), .. } if l == "b:1"));
        let err = CliError::from_status("a:1", &Status::not_found("query x not found"));
        assert!(!err.is_retryable());
        assert_eq!(err.code(), Some(Code::NotFound));
        assert_eq!(err.to_string(), "query x not found");
    }

    #[test]
    fn hints_move_to_the_leader() {
        let mut c = Client::new(vec!["a:1".into(), "b:2".into()]).unwrap();
        assert!(c.follow_hint("b:2"));
        assert_eq!(c.current_addr(), "b:2");
        assert!(!c.follow_hint("b:2"));
        assert!(c.follow_hint("c:3"));
        assert_eq!(c.current_addr(), "c:3");
        assert!(Client::new(vec![]).is_err());
    }
}
