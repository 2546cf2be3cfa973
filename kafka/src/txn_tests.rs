//! Tests of [`end_transaction`] against a fake broker on loopback that
//! answers from a script: which error codes are tried again, which end the
//! call, which coordinator is asked, and what the `EndTxn` carried.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_common::secrets::Secrets;
use sluice_common::spec::KafkaSecurity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::txn::{TxnEnd, TxnId, end_transaction};
use super::wire_tests::{end_txn_v3, find_coordinator_v3, response_header_v1};
use crate::error::Error;

/// What a fake broker answers, and what it was asked.
#[derive(Default)]
struct Script {
    /// `FindCoordinator` error codes, in turn; then 0.
    find: Mutex<VecDeque<i16>>,
    /// `EndTxn` error codes, in turn; then 0.
    end: Mutex<VecDeque<i16>>,
    /// The coordinator's port `FindCoordinator` names; the broker's own when
    /// unset.
    coordinator: Mutex<Option<u16>>,
    /// The `ApiVersions` ranges; the usual ones when empty.
    ranges: Vec<(i16, i16, i16)>,
    /// Every `EndTxn`: transactional id, producer id, epoch, commit.
    ended: Mutex<Vec<(String, i64, i16, bool)>>,
}

impl Script {
    fn codes(find: &[i16], end: &[i16]) -> Arc<Script> {
        Arc::new(Script {
            find: Mutex::new(find.iter().copied().collect()),
            end: Mutex::new(end.iter().copied().collect()),
            ..Script::default()
        })
    }
}

/// Starts a fake broker; returns its port.
async fn fake_broker(script: Arc<Script>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, port, Arc::clone(&script)));
        }
    });
    port
}

async fn serve(mut stream: TcpStream, port: u16, script: Arc<Script>) {
    loop {
        let Ok(size) = stream.read_i32().await else {
            return;
        };
        let mut frame = vec![0u8; size as usize];
        stream.read_exact(&mut frame).await.unwrap();
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let id = i32::from_be_bytes(frame[4..8].try_into().unwrap());
        let client_id = i16::from_be_bytes([frame[8], frame[9]]) as usize;
        // Past the client id and, in a flexible header, its tagged fields.
        let body = &frame[10 + client_id + usize::from(key != 18)..];
        let answer = match key {
            18 => {
                let ranges = if script.ranges.is_empty() {
                    vec![(10, 0, 6), (26, 0, 5)]
                } else {
                    script.ranges.clone()
                };
                let mut a = id.to_be_bytes().to_vec();
                a.extend(0i16.to_be_bytes());
                a.extend((ranges.len() as i32).to_be_bytes());
                for (k, lo, hi) in ranges {
                    a.extend([k.to_be_bytes(), lo.to_be_bytes(), hi.to_be_bytes()].concat());
                }
                a
            }
            10 => {
                let code = script.find.lock().unwrap().pop_front().unwrap_or(0);
                let to = script.coordinator.lock().unwrap().unwrap_or(port);
                [
                    response_header_v1(id),
                    find_coordinator_v3(code, "127.0.0.1", to as i32),
                ]
                .concat()
            }
            26 => {
                let len = body[0] as usize - 1;
                let txn = String::from_utf8(body[1..1 + len].to_vec()).unwrap();
                let rest = &body[1 + len..];
                let pid = i64::from_be_bytes(rest[..8].try_into().unwrap());
                let epoch = i16::from_be_bytes([rest[8], rest[9]]);
                let commit = rest[10] == 1;
                script.ended.lock().unwrap().push((txn, pid, epoch, commit));
                let code = script.end.lock().unwrap().pop_front().unwrap_or(0);
                [response_header_v1(id), end_txn_v3(code)].concat()
            }
            other => panic!("unexpected api key {other}"),
        };
        stream
            .write_all(&(answer.len() as i32).to_be_bytes())
            .await
            .unwrap();
        stream.write_all(&answer).await.unwrap();
    }
}

fn txn() -> TxnId {
    TxnId {
        transactional_id: "q/sink-3".into(),
        producer_id: 12,
        producer_epoch: 4,
    }
}

const DEADLINE: Duration = Duration::from_secs(5);

/// Ends [`txn`] at `servers` (committing it or not) without security.
async fn end(servers: &str, commit: bool, deadline: Duration) -> Result<TxnEnd, Error> {
    end_transaction(
        servers,
        &KafkaSecurity::default(),
        &Secrets::default(),
        &txn(),
        commit,
        deadline,
    )
    .await
}

#[tokio::test]
async fn transient_answers_are_tried_again_until_the_transaction_ends() {
    // COORDINATOR_NOT_AVAILABLE, then NOT_COORDINATOR and
    // CONCURRENT_TRANSACTIONS: every one passes.
    let script = Script::codes(&[15], &[16, 51]);
    let port = fake_broker(Arc::clone(&script)).await;
    let servers = format!("127.0.0.1:{port}");
    let end = end(&servers, true, DEADLINE).await;
    assert_eq!(end.unwrap(), TxnEnd::Ended);
    let ended = script.ended.lock().unwrap().clone();
    assert_eq!(ended, vec![("q/sink-3".to_string(), 12, 4, true); 3]);
}

#[tokio::test]
async fn the_coordinator_may_be_another_broker() {
    let coordinator = Script::codes(&[], &[]);
    let coordinator_port = fake_broker(Arc::clone(&coordinator)).await;
    let bootstrap = Script::codes(&[], &[]);
    *bootstrap.coordinator.lock().unwrap() = Some(coordinator_port);
    let port = fake_broker(Arc::clone(&bootstrap)).await;
    // The first server listed refuses connections: the next one is asked.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let servers = format!("127.0.0.1:{down},127.0.0.1:{port}");
    let end = end(&servers, false, DEADLINE).await;
    assert_eq!(end.unwrap(), TxnEnd::Ended);
    assert!(bootstrap.ended.lock().unwrap().is_empty());
    assert!(!coordinator.ended.lock().unwrap()[0].3, "an abort");
}

#[tokio::test]
async fn a_server_that_accepts_but_never_answers_costs_one_attempt() {
    let hung = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let port = fake_broker(Script::codes(&[], &[])).await;
    let servers = format!("127.0.0.1:{hung_port},127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let end = end(&servers, true, Duration::from_secs(2)).await;
    assert_eq!(end.unwrap(), TxnEnd::Ended);
    assert!(started.elapsed() < Duration::from_millis(1500));
    drop(hung);
}

#[tokio::test]
async fn a_newer_epoch_or_no_transaction_is_fenced() {
    for code in [47, 48, 90] {
        let port = fake_broker(Script::codes(&[], &[code])).await;
        let servers = format!("127.0.0.1:{port}");
        let end = end(&servers, true, DEADLINE).await;
        assert_eq!(end.unwrap(), TxnEnd::Fenced { code });
    }
}

#[tokio::test]
async fn other_codes_fail_at_once_naming_the_code_the_id_and_the_servers() {
    let port = fake_broker(Script::codes(&[], &[49])).await;
    let servers = format!("127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let err = end(&servers, true, DEADLINE).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "not retried");
    assert!(!err.is_retryable(), "{err}");
    let text = err.to_string();
    for part in [
        &servers,
        "q/sink-3",
        "49 INVALID_PRODUCER_ID_MAPPING",
        "commit",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
}

#[tokio::test]
async fn a_coordinator_that_stays_away_is_retryable_at_the_deadline() {
    let port = fake_broker(Script::codes(&[], &[16; 1000])).await;
    let servers = format!("127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let err = end(&servers, true, Duration::from_millis(400))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(900), "{took:?}");
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("16 NOT_COORDINATOR"), "{err}");
}

#[tokio::test]
async fn a_broker_without_end_txn_is_not_retried() {
    let script = Arc::new(Script {
        ranges: vec![(10, 0, 4)],
        ..Script::default()
    });
    let port = fake_broker(script).await;
    let servers = format!("127.0.0.1:{port}");
    let err = end(&servers, true, DEADLINE).await.unwrap_err();
    assert!(
        matches!(&err, Error::Kafka { retryable: false, reason, .. } if reason.contains("EndTxn")),
        "{err}"
    );
}
