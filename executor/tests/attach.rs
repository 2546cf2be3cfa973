//! In-process protocol test: `sluice_executor::run` against a fake driver
//! (a leader and a standby, see `support/`).
//!
//! ```text
//!  executor ──dial──► dead port ✗ ──rotate──► standby: UNAVAILABLE + sluice-leader
//!           ──follow hint──► leader: Hello / Welcome / tasks / results
//! ```

mod support;

use std::time::Duration;

use sluice_executor::ExecutorConfig;
use sluice_proto::{CancelTask, ErrorKind, driver_message};
use support::{Role, WAIT, error_kind, ok, serve, task, welcome};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_run_refuse_cancel_reconnect_and_drain() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap().to_string();
    let (conns_tx, mut conns) = mpsc::channel(4);
    let leader = serve(Role::Leader(conns_tx)).await;
    let standby = serve(Role::Standby {
        leader: leader.clone(),
    })
    .await;
    // A port with nothing behind it: bind, then free it.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);

    let shutdown = CancellationToken::new();
    let config = ExecutorConfig {
        drivers: vec![dead_addr, format!("http://{standby}")],
        slots: 1,
        heartbeat: Duration::from_millis(20),
        id: "exec-test".into(),
        max_state_bytes: sluice_executor::config::DEFAULT_MAX_STATE_BYTES,
        state: Default::default(),
        max_task_memory_bytes: sluice_executor::config::DEFAULT_MAX_TASK_MEMORY_BYTES,
        stores: Default::default(),
        tls: Default::default(),
        token: Default::default(),
        allowed_paths: None,
        secrets: Default::default(),
    };
    let executor = tokio::spawn(sluice_executor::run(config, shutdown.clone()));

    // The dead driver is skipped and the standby's hint is followed.
    let mut c = timeout(WAIT, conns.recv()).await.unwrap().unwrap();
    let hello = c.hello().await;
    assert_eq!((hello.executor_id.as_str(), hello.slots), ("exec-test", 1));
    assert_eq!(hello.max_epoch_seen, 0);
    c.send(welcome(5)).await;

    // One rate task: partition 0 of 2 over values 0..10.
    c.send(task("t1", 5, &dir, 2, 10)).await;
    let r = c.result().await;
    assert_eq!((r.task_id.as_str(), r.epoch), ("t1", 5));
    let o = ok(&r);
    assert_eq!(o.rows, 5);
    let Some(sluice_proto::task_output::Sink::Files(written)) = &o.sink else {
        panic!("no files in {o:?}");
    };
    let files = &written.files;
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, "part-00000000000000000003-00000.jsonl");
    let text = std::fs::read_to_string(out.path().join(&files[0].path)).unwrap();
    assert_eq!(files[0].bytes, text.len() as u64);
    let first = text.lines().next().unwrap();
    assert_eq!(first, r#"{"value":0,"timestamp_ms":10000}"#);
    assert_eq!(text.lines().count(), 5);

    // An older epoch is refused.
    c.send(task("t-old", 4, &dir, 2, 10)).await;
    let r = c.result().await;
    assert_eq!(r.task_id, "t-old");
    assert_eq!(error_kind(&r), ErrorKind::StaleEpoch);

    // The driver drops the stream: the executor attaches again, and says
    // which epoch it has seen.
    drop(c);
    let mut c = timeout(WAIT, conns.recv()).await.unwrap().unwrap();
    assert_eq!(c.hello().await.max_epoch_seen, 5);
    c.send(welcome(6)).await;

    // One slot: "big" runs, "queued" waits and is cancelled, "small" runs
    // after "big". Nothing is ever sent for "queued".
    let big_dir = out.path().join("big");
    let big_dir = big_dir.to_str().unwrap();
    c.send(task("big", 6, big_dir, 1, 200_000)).await;
    c.send(task("queued", 6, big_dir, 1, 100)).await;
    c.send(driver_message::Kind::Cancel(CancelTask {
        task_id: "queued".into(),
    }))
    .await;
    let small_dir = out.path().join("small");
    c.send(task("small", 6, small_dir.to_str().unwrap(), 1, 4))
        .await;
    let r = c.result().await;
    assert_eq!(r.task_id, "big");
    assert_eq!(ok(&r).rows, 200_000);
    let r = c.result().await;
    assert_eq!(r.task_id, "small");
    assert_eq!(ok(&r).rows, 4);

    // Drain: a running task still reports, a new one is refused, then the
    // stream closes and run returns.
    let drain_dir = out.path().join("drain");
    c.send(task("last", 6, drain_dir.to_str().unwrap(), 1, 1_000_000))
        .await;
    c.running(1).await;
    shutdown.cancel();
    c.send(task("late", 6, &dir, 1, 4)).await;
    let r = c.result().await;
    assert_eq!(r.task_id, "late");
    assert_eq!(error_kind(&r), ErrorKind::Retryable);
    let r = c.result().await;
    assert_eq!(r.task_id, "last");
    assert_eq!(ok(&r).rows, 1_000_000);
    assert!(
        c.next().await.is_none(),
        "the stream should end after a drain"
    );
    drop(c);

    let done = timeout(Duration::from_secs(3), executor).await;
    done.expect("run did not return after the drain")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn run_returns_promptly_when_no_driver_is_up() {
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let shutdown = CancellationToken::new();
    let config = ExecutorConfig {
        drivers: vec![addr],
        slots: 1,
        heartbeat: Duration::from_millis(100),
        id: "lonely".into(),
        max_state_bytes: sluice_executor::config::DEFAULT_MAX_STATE_BYTES,
        state: Default::default(),
        max_task_memory_bytes: sluice_executor::config::DEFAULT_MAX_TASK_MEMORY_BYTES,
        stores: Default::default(),
        tls: Default::default(),
        token: Default::default(),
        allowed_paths: None,
        secrets: Default::default(),
    };
    let run = tokio::spawn(sluice_executor::run(config, shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "run must keep retrying");
    shutdown.cancel();
    timeout(Duration::from_secs(2), run)
        .await
        .expect("run did not stop")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn an_invalid_config_is_refused() {
    let config = ExecutorConfig {
        drivers: vec![],
        slots: 1,
        heartbeat: Duration::from_millis(100),
        id: "x".into(),
        max_state_bytes: sluice_executor::config::DEFAULT_MAX_STATE_BYTES,
        state: Default::default(),
        max_task_memory_bytes: sluice_executor::config::DEFAULT_MAX_TASK_MEMORY_BYTES,
        stores: Default::default(),
        tls: Default::default(),
        token: Default::default(),
        allowed_paths: None,
        secrets: Default::default(),
    };
    let err = sluice_executor::run(config, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--driver"), "{err}");
}
