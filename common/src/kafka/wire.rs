//! The raw Kafka connection of the driver's `EndTxn`: size-prefixed frames
//! of `kafka-protocol` messages on a stream Sluice opens itself, for the
//! three requests no client sends for another process's transaction
//! (`docs/kafka-client.md`).
//!
//! ```text
//!  dial(addr) ─► Conn<TcpStream> ─► versions() ─► choose_versions ─► Versions
//!                                   find_coordinator(v, id) ─► Found { code, host:port }
//!                                   end_txn(v, end_txn_request(..)) ─► error code
//! ```
//!
//! [`Conn`] is generic over the stream (`AsyncRead + AsyncWrite`): TLS is
//! a stream wrapped around the `TcpStream` in [`dial`], and SASL a
//! handshake on the `Conn` before its first request. Every call ends by an
//! instant it is given. Errors are plain text: the caller names the servers
//! and the transaction, and treats a failed call as retryable.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, ProducerId, RequestHeader, ResponseHeader,
    TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

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
    let pick = |key: ApiKey, preferred: i16, (min, max): (i16, i16)| -> Result<i16, String> {
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
        let (lo, hi) = (lo.max(min), hi.min(max));
        Ok(preferred.clamp(lo, hi))
    };
    Ok(Versions {
        find_coordinator: pick(
            ApiKey::FindCoordinator,
            FIND_COORDINATOR_PREFERRED,
            FIND_COORDINATOR_VERSIONS,
        )?,
        end_txn: pick(ApiKey::EndTxn, END_TXN_PREFERRED, END_TXN_VERSIONS)?,
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

/// Opens a plaintext connection to `addr`, by `until`.
pub(super) async fn dial(addr: &str, until: Instant) -> Result<Conn<TcpStream>, String> {
    let stream = match tokio::time::timeout_at(until, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(format!("connect to {addr}: {e}")),
        Err(_) => return Err(format!("connect to {addr}: no answer in time")),
    };
    // One small request at a time: send each at once.
    let _ = stream.set_nodelay(true);
    Ok(Conn::new(stream, addr.to_string()))
}

/// A connection to one broker, one request in flight at a time.
pub(super) struct Conn<S> {
    stream: S,
    peer: String,
    correlation_id: i32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// A connection on `stream`, to the broker `peer` (for messages).
    pub fn new(stream: S, peer: String) -> Self {
        Conn {
            stream,
            peer,
            correlation_id: 0,
        }
    }

    /// The broker this connection is to.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The `(api key, min, max)` version ranges the broker supports.
    pub async fn versions(&mut self, until: Instant) -> Result<Vec<(i16, i16, i16)>, String> {
        let answer: ApiVersionsResponse = self
            .call(
                ApiKey::ApiVersions,
                API_VERSIONS_VERSION,
                &ApiVersionsRequest::default(),
                until,
            )
            .await?;
        if answer.error_code != 0 {
            return Err(format!(
                "ApiVersions: error {}",
                code_name(answer.error_code)
            ));
        }
        Ok(answer
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect())
    }

    /// The coordinator of transactional id `id`.
    pub async fn find_coordinator(
        &mut self,
        version: i16,
        id: &str,
        until: Instant,
    ) -> Result<Found, String> {
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
        found(version, answer)
    }

    /// Sends `request`; returns the coordinator's error code.
    pub async fn end_txn(
        &mut self,
        version: i16,
        request: EndTxnRequest,
        until: Instant,
    ) -> Result<i16, String> {
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
    ) -> Result<Resp, String> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let id = self.correlation_id;
        let frame = request_frame(key, version, id, request)?;
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
            Ok(Err(e)) => return Err(format!("{key:?} to {peer}: {e}")),
            Err(_) => return Err(format!("{key:?} to {peer}: no answer in time")),
        };
        decode_response(key, version, id, body)
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
