//! Tests of the raw connection (`wire`): frames byte for byte as the
//! protocol guide spells them, answers decoded, versions chosen; and the
//! answers of a fake broker, which `txn_tests` reuses.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, EndTxnResponse, FindCoordinatorRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::wire::*;

/// A request header as the protocol guide spells it (v1, or v2 with an
/// empty tagged-field section): key, version, correlation id, client id.
fn header(key: i16, version: i16, id: i32, flexible: bool) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(key.to_be_bytes());
    h.extend(version.to_be_bytes());
    h.extend(id.to_be_bytes());
    h.extend((CLIENT_ID.len() as i16).to_be_bytes());
    h.extend(CLIENT_ID.as_bytes());
    if flexible {
        h.push(0);
    }
    h
}

fn framed(parts: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = parts.concat();
    [(body.len() as i32).to_be_bytes().as_slice(), &body].concat()
}

fn end_txn(commit: bool) -> kafka_protocol::messages::EndTxnRequest {
    end_txn_request("t1", 4000, 7, commit)
}

#[test]
fn an_end_txn_v3_frame_is_flexible() {
    let frame = request_frame(ApiKey::EndTxn, 3, 9, &end_txn(true)).unwrap();
    let mut body = vec![3, b't', b'1']; // compact string: length + 1
    body.extend(4000i64.to_be_bytes());
    body.extend(7i16.to_be_bytes());
    body.extend([1, 0]); // committed, no tagged fields
    assert_eq!(frame.to_vec(), framed(&[&header(26, 3, 9, true), &body]));

    let abort = request_frame(ApiKey::EndTxn, 1, 9, &end_txn(false)).unwrap();
    let mut body = vec![0, 2, b't', b'1']; // v1: a plain string
    body.extend(4000i64.to_be_bytes());
    body.extend(7i16.to_be_bytes());
    body.push(0);
    assert_eq!(abort.to_vec(), framed(&[&header(26, 1, 9, false), &body]));
}

#[test]
fn a_find_coordinator_frame_has_one_key_or_a_batch() {
    let request = |v: i16| {
        let key = StrBytes::from_static_str("t1");
        let r = FindCoordinatorRequest::default().with_key_type(KEY_TYPE_TRANSACTION);
        let r = if v >= 4 {
            r.with_coordinator_keys(vec![key])
        } else {
            r.with_key(key)
        };
        request_frame(ApiKey::FindCoordinator, v, 1, &r)
            .unwrap()
            .to_vec()
    };
    let v3 = [3, b't', b'1', 1, 0];
    assert_eq!(request(3), framed(&[&header(10, 3, 1, true), &v3]));
    let v4 = [1, 2, 3, b't', b'1', 0]; // key type, then a compact array
    assert_eq!(request(4), framed(&[&header(10, 4, 1, true), &v4]));
}

/// The body of a v3 `FindCoordinator` response (after its header).
pub(super) fn find_coordinator_v3(code: i16, host: &str, port: i32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(0i32.to_be_bytes()); // throttle
    b.extend(code.to_be_bytes());
    b.push(0); // null error message
    b.extend(1i32.to_be_bytes()); // node id
    b.push(host.len() as u8 + 1);
    b.extend(host.as_bytes());
    b.extend(port.to_be_bytes());
    b.push(0);
    b
}

/// The body of a v3 `EndTxn` response.
pub(super) fn end_txn_v3(code: i16) -> Vec<u8> {
    [0i32.to_be_bytes().as_slice(), &code.to_be_bytes(), &[0]].concat()
}

/// A flexible response header (v1): correlation id, no tagged fields.
pub(super) fn response_header_v1(id: i32) -> Vec<u8> {
    [id.to_be_bytes().as_slice(), &[0]].concat()
}

#[test]
fn responses_decode_and_answer_their_request() {
    let body = [response_header_v1(5), find_coordinator_v3(0, "b1", 9092)].concat();
    let found_ = found(
        3,
        decode_response(ApiKey::FindCoordinator, 3, 5, Bytes::from(body)).unwrap(),
    )
    .unwrap();
    assert_eq!(found_.addr(), "b1:9092");
    assert_eq!(found_.code, 0);

    let body = [response_header_v1(6), end_txn_v3(47)].concat();
    let r: EndTxnResponse = decode_response(ApiKey::EndTxn, 3, 6, Bytes::from(body)).unwrap();
    assert_eq!(r.error_code, 47);

    let other = [response_header_v1(7), end_txn_v3(0)].concat();
    let err =
        decode_response::<EndTxnResponse>(ApiKey::EndTxn, 3, 6, Bytes::from(other)).unwrap_err();
    assert!(err.contains("answers request 7, not 6"), "{err}");

    let short = Bytes::from(response_header_v1(6)[..2].to_vec());
    let err = decode_response::<EndTxnResponse>(ApiKey::EndTxn, 3, 6, short).unwrap_err();
    assert!(err.contains("malformed EndTxn"), "{err}");
}

#[test]
fn versions_prefer_three_and_follow_the_broker() {
    let (fc, et) = (ApiKey::FindCoordinator as i16, ApiKey::EndTxn as i16);
    let both = |f: i16, e: i16| Versions {
        find_coordinator: f,
        end_txn: e,
    };
    assert_eq!(choose_versions(&[(fc, 0, 6), (et, 0, 5)]), Ok(both(3, 3)));
    assert_eq!(choose_versions(&[(fc, 4, 9), (et, 4, 5)]), Ok(both(4, 4)));
    assert_eq!(choose_versions(&[(fc, 0, 2), (et, 0, 1)]), Ok(both(2, 1)));
    let err = choose_versions(&[(fc, 0, 6)]).unwrap_err();
    assert!(err.contains("does not support EndTxn"), "{err}");
    let err = choose_versions(&[(fc, 0, 6), (et, 5, 5)]).unwrap_err();
    assert!(
        err.contains("EndTxn v5..v5, and this client v0..v4"),
        "{err}"
    );
    let err = choose_versions(&[(fc, 0, 0), (et, 0, 5)]).unwrap_err();
    assert!(err.contains("FindCoordinator v0..v0"), "{err}");
}

#[tokio::test]
async fn a_connection_frames_requests_and_reads_the_answer() {
    let (client, mut broker) = tokio::io::duplex(4096);
    let mut conn = Conn::new(client, "fake:1".into());
    let serve = tokio::spawn(async move {
        let size = broker.read_i32().await.unwrap();
        let mut frame = vec![0u8; size as usize];
        broker.read_exact(&mut frame).await.unwrap();
        assert_eq!(&frame[..4], &[0, 26, 0, 3], "EndTxn v3");
        let id = i32::from_be_bytes(frame[4..8].try_into().unwrap());
        let answer = [response_header_v1(id), end_txn_v3(90)].concat();
        broker
            .write_all(&(answer.len() as i32).to_be_bytes())
            .await
            .unwrap();
        broker.write_all(&answer).await.unwrap();
        // Then a frame no broker sends.
        broker.write_all(&i32::MAX.to_be_bytes()).await.unwrap();
        let _ = broker.read_to_end(&mut Vec::new()).await;
    });
    let until = Instant::now() + std::time::Duration::from_secs(5);
    assert_eq!(conn.end_txn(3, end_txn(true), until).await, Ok(90));
    let err = conn.end_txn(3, end_txn(true), until).await.unwrap_err();
    assert!(!err.permanent, "{err}");
    assert!(
        err.reason.contains("fake:1") && err.reason.contains("bytes"),
        "{err}"
    );
    drop(conn);
    serve.await.unwrap();
}

#[test]
fn codes_are_named_as_kafka_names_them() {
    assert_eq!(code_name(47), "47 INVALID_PRODUCER_EPOCH");
    assert_eq!(code_name(90), "90 PRODUCER_FENCED");
    assert_eq!(code_name(16), "16 NOT_COORDINATOR");
    assert_eq!(code_name(-1), "-1 UNKNOWN_SERVER_ERROR");
    assert_eq!(code_name(32000), "32000 (unknown to this client)");
}

/// A fake broker's side of a SASL login: answers `SaslHandshake` with
/// `handshake` (naming `enabled`), then each `SaslAuthenticate` with the
/// next code of `auth`; returns the mechanism asked for and, per
/// `SaslAuthenticate`, its version and bytes.
async fn serve_sasl(
    mut broker: tokio::io::DuplexStream,
    handshake: i16,
    enabled: &[&str],
    auth: &[i16],
) -> (String, Vec<(i16, Vec<u8>)>) {
    async fn frame(broker: &mut tokio::io::DuplexStream) -> Option<Vec<u8>> {
        let size = broker.read_i32().await.ok()?;
        let mut frame = vec![0u8; size as usize];
        broker.read_exact(&mut frame).await.ok()?;
        Some(frame)
    }
    async fn answer(broker: &mut tokio::io::DuplexStream, body: Vec<u8>) {
        broker
            .write_all(&(body.len() as i32).to_be_bytes())
            .await
            .unwrap();
        broker.write_all(&body).await.unwrap();
    }
    // Request header v1: key, version, correlation id, client id.
    let header = |f: &[u8]| {
        let key = i16::from_be_bytes([f[0], f[1]]);
        let version = i16::from_be_bytes([f[2], f[3]]);
        let id = i32::from_be_bytes(f[4..8].try_into().unwrap());
        let client = i16::from_be_bytes([f[8], f[9]]) as usize;
        (key, version, id, 10 + client)
    };
    let f = frame(&mut broker).await.unwrap();
    let (key, version, id, at) = header(&f);
    assert_eq!((key, version), (17, 1), "SaslHandshake v1");
    let len = i16::from_be_bytes([f[at], f[at + 1]]) as usize;
    let mechanism = String::from_utf8(f[at + 2..at + 2 + len].to_vec()).unwrap();
    let mut a = id.to_be_bytes().to_vec();
    a.extend(handshake.to_be_bytes());
    a.extend((enabled.len() as i32).to_be_bytes());
    for m in enabled {
        a.extend((m.len() as i16).to_be_bytes());
        a.extend(m.as_bytes());
    }
    answer(&mut broker, a).await;
    let mut seen = Vec::new();
    for &code in auth {
        let Some(f) = frame(&mut broker).await else {
            break;
        };
        let (key, version, id, at) = header(&f);
        assert_eq!(key, 36, "SaslAuthenticate");
        let len = i32::from_be_bytes(f[at..at + 4].try_into().unwrap()) as usize;
        seen.push((version, f[at + 4..at + 4 + len].to_vec()));
        // v1: error code, error message, auth bytes, session lifetime.
        let mut a = id.to_be_bytes().to_vec();
        a.extend(code.to_be_bytes());
        let message = "Authentication failed: invalid credentials";
        a.extend((message.len() as i16).to_be_bytes());
        a.extend(message.as_bytes());
        a.extend(0i32.to_be_bytes());
        a.extend(0i64.to_be_bytes());
        answer(&mut broker, a).await;
    }
    (mechanism, seen)
}

/// A connection logging in as "alice" with PLAIN, over an in-memory
/// stream; the password file is in `dir`.
fn plain_conn(
    client: tokio::io::DuplexStream,
    dir: &tempfile::TempDir,
) -> Conn<tokio::io::DuplexStream> {
    use sluice_common::spec::{KafkaSecurity, SaslMechanism, SecurityProtocol};
    let password = dir.path().join("pw");
    std::fs::write(&password, "s3cret-pw\n").unwrap();
    let settings = KafkaSecurity {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl_mechanism: Some(SaslMechanism::Plain),
        sasl_username: Some("alice".into()),
        sasl_password_file: Some("pw".into()),
        ..Default::default()
    };
    let secrets = sluice_common::secrets::Secrets::new::<&str>(Some(dir.path()), &[]).unwrap();
    let secured =
        super::security::Secured::load(&settings, &secrets, "sink.kafka.security").unwrap();
    Conn::secured(client, "fake:1", &std::sync::Arc::new(secured))
}

/// `SaslHandshake` up to v1, `SaslAuthenticate` up to v2.
const SASL_RANGES: [(i16, i16, i16); 2] = [(17, 0, 1), (36, 0, 2)];

#[tokio::test]
async fn a_plain_login_is_framed_as_kafka_frames_it() {
    let dir = tempfile::tempdir().unwrap();
    let (client, broker) = tokio::io::duplex(4096);
    let mut conn = plain_conn(client, &dir);
    let serve = tokio::spawn(serve_sasl(broker, 0, &["PLAIN"], &[0]));
    let until = Instant::now() + std::time::Duration::from_secs(5);
    conn.authenticate(&SASL_RANGES, until).await.unwrap();
    let (mechanism, seen) = serve.await.unwrap();
    assert_eq!(mechanism, "PLAIN");
    assert_eq!(seen, vec![(1, b"\0alice\0s3cret-pw".to_vec())]);
}

#[tokio::test]
async fn a_refused_login_is_permanent_and_names_user_and_mechanism() {
    let dir = tempfile::tempdir().unwrap();
    let (client, broker) = tokio::io::duplex(4096);
    let mut conn = plain_conn(client, &dir);
    let serve = tokio::spawn(serve_sasl(broker, 0, &["PLAIN"], &[58]));
    let until = Instant::now() + std::time::Duration::from_secs(5);
    let err = conn.authenticate(&SASL_RANGES, until).await.unwrap_err();
    serve.await.unwrap();
    assert!(err.permanent, "{err}");
    assert!(
        err.reason
            .starts_with("SASL authentication failed for user \"alice\" (PLAIN): the broker answered 58 SASL_AUTHENTICATION_FAILED"),
        "{err}"
    );
    assert!(!err.reason.contains("s3cret-pw"), "{err}");
}

#[tokio::test]
async fn a_mechanism_the_broker_does_not_enable_is_named_with_those_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let (client, broker) = tokio::io::duplex(4096);
    let mut conn = plain_conn(client, &dir);
    const ENABLED: [&str; 2] = ["SCRAM-SHA-256", "SCRAM-SHA-512"];
    let serve = tokio::spawn(serve_sasl(broker, 33, &ENABLED, &[]));
    let until = Instant::now() + std::time::Duration::from_secs(5);
    let err = conn.authenticate(&SASL_RANGES, until).await.unwrap_err();
    let (_, seen) = serve.await.unwrap();
    assert!(seen.is_empty(), "no credentials are sent");
    assert!(err.permanent, "{err}");
    assert!(
        err.reason
            .contains("the broker does not enable PLAIN; it enables SCRAM-SHA-256, SCRAM-SHA-512"),
        "{err}"
    );

    // A listener without SASL at all.
    let (client, _broker) = tokio::io::duplex(4096);
    let mut conn = plain_conn(client, &dir);
    let err = conn.authenticate(&[(18, 0, 3)], until).await.unwrap_err();
    assert!(err.permanent, "{err}");
    assert!(
        err.reason
            .contains("does not support SaslHandshake (is SASL enabled on this listener?)"),
        "{err}"
    );
}

#[test]
fn the_host_checked_by_tls_is_the_address_without_its_port() {
    assert_eq!(host_of("broker-1.example:9093"), "broker-1.example");
    assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
    assert_eq!(host_of("[::1]:9093"), "::1");
}
