//! The raw Kafka connection of the driver's `EndTxn`: size-prefixed frames
//! of `kafka-protocol` messages on a stream Sluice opens itself, for the
//! three requests no client sends for another process's transaction
//! (`docs/kafka-client.md`).
//!
//! ```text
//!  dial(addr, secured) ─► TCP, then TLS when the settings say ─► Conn<Stream>
//!     versions() ─► authenticate(ranges): SaslHandshake, SaslAuthenticate* (sasl.rs)
//!     choose_versions ─► Versions
//!     find_coordinator(v, id) ─► Found { code, host:port }
//!     end_txn(v, end_txn_request(..)) ─► error code
//! ```
//!
//! [`Conn`] is generic over the stream (`AsyncRead + AsyncWrite`): TLS
//! (tokio-rustls on ring) is a stream wrapped around the `TcpStream` in
//! [`dial`], and SASL a handshake on the `Conn` after `ApiVersions` and
//! before any other request, as Kafka's clients do it: `SaslHandshake` v1,
//! then the mechanism's messages in `SaslAuthenticate` (v1, or the nearest
//! the broker speaks). Every call ends by an instant it is given. A
//! [`Failure`] is plain text and says whether it may pass: a refused
//! certificate or login will not, a broker that does not answer may. The
//! caller names the servers and the transaction.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, ProducerId, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rustls::pki_types::ServerName;
use sluice_common::spec::SaslMechanism;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::sasl::{Scram, ScramHash, plain};
use super::security::{Secured, rustls_error};

/// The client id on every request.
pub(super) const CLIENT_ID: &str = "sluice-driver";

/// The largest response accepted: these are a few hundred bytes (an
/// `ApiVersions` answer a few kilobytes); anything near this is not Kafka.
const MAX_RESPONSE: usize = 1 << 20;

/// `FindCoordinator`'s key type of a transactional id.
pub(super) const KEY_TYPE_TRANSACTION: i8 = 1;

/// The version of `ApiVersions`: v0 is understood by every broker, and the
/// answer lists the ranges of the others.
const API_VERSIONS_VERSION: i16 = 0;

/// The preferred versions: `FindCoordinator` v3 is the last with one key
/// (v4 on batch keys), `EndTxn` v3 the first flexible one and the last
/// before KIP-890's v5 (which bumps the epoch; v4 only adds an error code).
const FIND_COORDINATOR_PREFERRED: i16 = 3;
const END_TXN_PREFERRED: i16 = 3;
/// The versions this module can speak: `FindCoordinator` has a key type
/// (a transactional id) from v1.
const FIND_COORDINATOR_VERSIONS: (i16, i16) = (1, 6);
const END_TXN_VERSIONS: (i16, i16) = (0, 4);
/// SASL: `SaslHandshake` v1 (v0 sends the mechanism's messages unframed,
/// which this client does not do), `SaslAuthenticate` v1 preferred (as
/// krafka and the Java client send it), any of v0..v2 taken.
const SASL_HANDSHAKE_VERSIONS: (i16, i16) = (1, 1);
const SASL_AUTHENTICATE_PREFERRED: i16 = 1;
const SASL_AUTHENTICATE_VERSIONS: (i16, i16) = (0, 2);

/// Why a call failed, and whether another attempt may do better.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failure {
    pub reason: String,
    /// A refused certificate or login, a broker without a request: asking
    /// again will not help.
    pub permanent: bool,
}

impl Failure {
    pub fn transient(reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            permanent: false,
        }
    }

    pub fn permanent(reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            permanent: true,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A broker's version of `key` within `ours`: `preferred` where it has it,
/// else the nearest both sides speak.
fn pick(
    ranges: &[(i16, i16, i16)],
    key: ApiKey,
    preferred: i16,
    (min, max): (i16, i16),
) -> Result<i16, String> {
    let (_, lo, hi) = ranges
        .iter()
        .copied()
        .find(|(k, _, _)| *k == key as i16)
        .ok_or_else(|| format!("the broker does not support {key:?}"))?;
    if lo.max(min) > hi.min(max) {
        return Err(format!(
            "the broker supports {key:?} v{lo}..v{hi}, and this client v{min}..v{max}"
        ));
    }
    Ok(preferred.clamp(lo.max(min), hi.min(max)))
}

/// The request versions chosen for a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Versions {
    pub find_coordinator: i16,
    pub end_txn: i16,
}

/// Picks the versions to use from a broker's `(api key, min, max)` ranges:
/// the preferred one where the broker has it, else the nearest both sides
/// speak.
pub(super) fn choose_versions(ranges: &[(i16, i16, i16)]) -> Result<Versions, String> {
    Ok(Versions {
        find_coordinator: pick(
            ranges,
            ApiKey::FindCoordinator,
            FIND_COORDINATOR_PREFERRED,
            FIND_COORDINATOR_VERSIONS,
        )?,
        end_txn: pick(ranges, ApiKey::EndTxn, END_TXN_PREFERRED, END_TXN_VERSIONS)?,
    })
}

/// What `FindCoordinator` answered for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    pub code: i16,
    pub message: Option<String>,
    pub host: String,
    pub port: i32,
}

impl Found {
    /// `host:port` of the coordinator.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// A request frame: its size, the request header, the body.
pub(super) fn request_frame<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<BytesMut, String> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    header
        .encode(&mut buf, key.request_header_version(version))
        .and_then(|()| body.encode(&mut buf, version))
        .map_err(|e| format!("encode {key:?} v{version}: {e:#}"))?;
    let size = i32::try_from(buf.len() - 4).map_err(|_| format!("{key:?} is too large"))?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// A response frame's body (after its size): the response header, which
/// must answer `correlation_id`, then the response.
pub(super) fn decode_response<R: Decodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut frame: Bytes,
) -> Result<R, String> {
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
        .map_err(|e| format!("malformed {key:?} v{version} response header: {e:#}"))?;
    if header.correlation_id != correlation_id {
        return Err(format!(
            "the {key:?} response answers request {}, not {correlation_id}",
            header.correlation_id
        ));
    }
    R::decode(&mut frame, version)
        .map_err(|e| format!("malformed {key:?} v{version} response: {e:#}"))
}

/// A byte stream to a broker: TCP, or TLS over TCP.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(super) type Stream = Box<dyn Io>;

/// Opens a connection to `addr` by `until`: TCP, then the TLS handshake
/// when `secured` has TLS (the broker's certificate must name the host or
/// address of `addr`). A refused certificate is a permanent failure.
pub(super) async fn dial(
    addr: &str,
    secured: &Arc<Secured>,
    until: Instant,
) -> Result<Conn<Stream>, Failure> {
    let tcp = match tokio::time::timeout_at(until, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(Failure::transient(format!("connect to {addr}: {e}"))),
        Err(_) => {
            return Err(Failure::transient(format!(
                "connect to {addr}: no answer in time"
            )));
        }
    };
    // One small request at a time: send each at once.
    let _ = tcp.set_nodelay(true);
    let Some(config) = secured.tls() else {
        return Ok(Conn::secured(Box::new(tcp), addr, secured));
    };
    let host = host_of(addr);
    let name = ServerName::try_from(host.to_string()).map_err(|_| {
        Failure::permanent(format!(
            "{addr}: {host:?} is not a host name or an address TLS can check"
        ))
    })?;
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout_at(until, connector.connect(name, tcp)).await {
        Ok(Ok(tls)) => Ok(Conn::secured(Box::new(tls), addr, secured)),
        Ok(Err(e)) => Err(io_failure(
            secured,
            &format!("TLS handshake with {addr}"),
            &e,
        )),
        Err(_) => Err(Failure::transient(format!(
            "TLS handshake with {addr}: no answer in time"
        ))),
    }
}

/// The host of `host:port` (an IPv6 address without its brackets).
pub(super) fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// An I/O error: a TLS failure (a certificate refused by either side) will
/// not pass; anything else (a reset, an end of stream) may.
fn io_failure(secured: &Secured, context: &str, e: &std::io::Error) -> Failure {
    match rustls_error(e) {
        Some(tls) => Failure::permanent(format!("{context}: {}", secured.tls_refused(tls))),
        None => Failure::transient(format!("{context}: {e}")),
    }
}

/// A connection to one broker, one request in flight at a time.
pub(super) struct Conn<S> {
    stream: S,
    peer: String,
    correlation_id: i32,
    /// Its security: the SASL login, and what a TLS failure means.
    secured: Arc<Secured>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// A plaintext connection on `stream`, to the broker `peer` (for
    /// messages).
    #[cfg(test)]
    pub fn new(stream: S, peer: String) -> Self {
        Conn::secured(stream, &peer, &Arc::new(Secured::plaintext()))
    }

    /// A connection on `stream` secured by `secured` (its TLS, if any,
    /// already wrapped around it).
    pub fn secured(stream: S, peer: &str, secured: &Arc<Secured>) -> Self {
        Conn {
            stream,
            peer: peer.to_string(),
            correlation_id: 0,
            secured: Arc::clone(secured),
        }
    }

    /// The broker this connection is to.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The `(api key, min, max)` version ranges the broker supports.
    pub async fn versions(&mut self, until: Instant) -> Result<Vec<(i16, i16, i16)>, Failure> {
        let answer: ApiVersionsResponse = self
            .call(
                ApiKey::ApiVersions,
                API_VERSIONS_VERSION,
                &ApiVersionsRequest::default(),
                until,
            )
            .await?;
        if answer.error_code != 0 {
            return Err(Failure::transient(format!(
                "ApiVersions: error {}",
                code_name(answer.error_code)
            )));
        }
        Ok(answer
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect())
    }

    /// Logs in with the SASL settings of the connection, if any; `ranges`
    /// are the broker's versions. A refused login, a mechanism the broker
    /// does not enable, or a broker that does not prove it knows the
    /// password (SCRAM) is a permanent failure naming the user and the
    /// mechanism.
    pub async fn authenticate(
        &mut self,
        ranges: &[(i16, i16, i16)],
        until: Instant,
    ) -> Result<(), Failure> {
        let secured = Arc::clone(&self.secured);
        let Some(login) = secured.login() else {
            return Ok(());
        };
        let refused = |detail: String| Failure::permanent(secured.sasl_refused(&detail));
        let handshake = pick(
            ranges,
            ApiKey::SaslHandshake,
            SASL_HANDSHAKE_VERSIONS.1,
            SASL_HANDSHAKE_VERSIONS,
        )
        .map_err(|r| refused(format!("{r} (is SASL enabled on this listener?)")))?;
        let authenticate = pick(
            ranges,
            ApiKey::SaslAuthenticate,
            SASL_AUTHENTICATE_PREFERRED,
            SASL_AUTHENTICATE_VERSIONS,
        )
        .map_err(refused)?;
        let mechanism = login.mechanism.as_str();
        let request =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
        // A broker that hangs up here may pass, or may not enable the
        // mechanism and say so by hanging up (tansu 0.6.0 does, where Kafka
        // answers UNSUPPORTED_SASL_MECHANISM): it stays transient, with a hint.
        let answer: SaslHandshakeResponse = self
            .call(ApiKey::SaslHandshake, handshake, &request, until)
            .await
            .map_err(|f| match f.permanent {
                true => f,
                false => Failure::transient(format!(
                    "{} (a broker that does not enable {mechanism} may hang up instead of \
                     answering)",
                    f.reason
                )),
            })?;
        match answer.error_code {
            0 => {}
            // UNSUPPORTED_SASL_MECHANISM
            33 => {
                let enabled: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
                return Err(refused(format!(
                    "the broker does not enable {mechanism}; it enables {}",
                    match enabled.is_empty() {
                        true => "none it names".to_string(),
                        false => enabled.join(", "),
                    }
                )));
            }
            code => {
                return Err(refused(format!(
                    "SaslHandshake answered error {}",
                    code_name(code)
                )));
            }
        }
        let hash = match login.mechanism {
            SaslMechanism::Plain => {
                let bytes = plain(login.user, login.password);
                self.sasl_step(authenticate, bytes.to_vec(), until).await?;
                return Ok(());
            }
            SaslMechanism::ScramSha256 => ScramHash::Sha256,
            SaslMechanism::ScramSha512 => ScramHash::Sha512,
        };
        let mut scram = Scram::new(hash, login.user, login.password).map_err(Failure::transient)?;
        let server_first = self
            .sasl_step(authenticate, scram.client_first(), until)
            .await?;
        let client_final = scram.client_final(&server_first).map_err(refused)?;
        let server_final = self.sasl_step(authenticate, client_final, until).await?;
        scram.verify_server_final(&server_final).map_err(refused)
    }

    /// One `SaslAuthenticate`: the mechanism's message out, the broker's
    /// back. An error code is a refused login.
    async fn sasl_step(
        &mut self,
        version: i16,
        bytes: Vec<u8>,
        until: Instant,
    ) -> Result<Bytes, Failure> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
        let answer: SaslAuthenticateResponse = self
            .call(ApiKey::SaslAuthenticate, version, &request, until)
            .await?;
        if answer.error_code != 0 {
            let mut detail = format!("the broker answered {}", code_name(answer.error_code));
            if let Some(m) = answer.error_message.filter(|m| !m.is_empty()) {
                detail.push_str(&format!(" ({m})"));
            }
            return Err(Failure::permanent(self.secured.sasl_refused(&detail)));
        }
        Ok(answer.auth_bytes)
    }

    /// The coordinator of transactional id `id`.
    pub async fn find_coordinator(
        &mut self,
        version: i16,
        id: &str,
        until: Instant,
    ) -> Result<Found, Failure> {
        let key = StrBytes::from_string(id.to_string());
        let request = FindCoordinatorRequest::default().with_key_type(KEY_TYPE_TRANSACTION);
        let request = if version >= 4 {
            request.with_coordinator_keys(vec![key])
        } else {
            request.with_key(key)
        };
        let answer: FindCoordinatorResponse = self
            .call(ApiKey::FindCoordinator, version, &request, until)
            .await?;
        found(version, answer).map_err(Failure::transient)
    }

    /// Sends `request`; returns the coordinator's error code.
    pub async fn end_txn(
        &mut self,
        version: i16,
        request: EndTxnRequest,
        until: Instant,
    ) -> Result<i16, Failure> {
        let answer: EndTxnResponse = self.call(ApiKey::EndTxn, version, &request, until).await?;
        Ok(answer.error_code)
    }

    /// One request and its response, by `until`.
    async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
        until: Instant,
    ) -> Result<Resp, Failure> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let id = self.correlation_id;
        let frame = request_frame(key, version, id, request).map_err(Failure::permanent)?;
        let exchange = async {
            self.stream.write_all(&frame).await?;
            self.stream.flush().await?;
            let size = self.stream.read_i32().await?;
            let size = usize::try_from(size)
                .ok()
                .filter(|s| *s <= MAX_RESPONSE)
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a response frame of {size} bytes"),
                    )
                })?;
            let mut body = vec![0u8; size];
            self.stream.read_exact(&mut body).await?;
            Ok::<_, std::io::Error>(Bytes::from(body))
        };
        let peer = &self.peer;
        let body = match tokio::time::timeout_at(until, exchange).await {
            Ok(Ok(body)) => body,
            // A TLS alert after the handshake (a client certificate the
            // broker refused, under TLS 1.3) comes with the first answer.
            Ok(Err(e)) => return Err(io_failure(&self.secured, &format!("{key:?} to {peer}"), &e)),
            Err(_) => {
                return Err(Failure::transient(format!(
                    "{key:?} to {peer}: no answer in time"
                )));
            }
        };
        decode_response(key, version, id, body).map_err(Failure::transient)
    }
}

/// `EndTxn` for the transaction of transactional id `id`, `producer_id` and
/// `producer_epoch`.
pub(super) fn end_txn_request(
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_committed(commit)
}

/// An error code with Kafka's name for it: `49 INVALID_PRODUCER_ID_MAPPING`.
pub(super) fn code_name(code: i16) -> String {
    let Some(error) = ResponseError::try_from_code(code) else {
        return format!("{code} NONE");
    };
    if let ResponseError::Unknown(_) = error {
        return format!("{code} (unknown to this client)");
    }
    let mut name = String::new();
    for (i, c) in format!("{error}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    format!("{code} {name}")
}

/// The one coordinator a `FindCoordinator` answer names: its top-level
/// fields up to v3, its one batch entry from v4.
pub(super) fn found(version: i16, answer: FindCoordinatorResponse) -> Result<Found, String> {
    if version < 4 {
        return Ok(Found {
            code: answer.error_code,
            message: answer.error_message.map(|m| m.to_string()),
            host: answer.host.to_string(),
            port: answer.port,
        });
    }
    let c = answer
        .coordinators
        .into_iter()
        .next()
        .ok_or("FindCoordinator answered no coordinator")?;
    Ok(Found {
        code: c.error_code,
        message: c.error_message.map(|m| m.to_string()),
        host: c.host.to_string(),
        port: c.port,
    })
}
