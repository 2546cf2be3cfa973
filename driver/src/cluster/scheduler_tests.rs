//! The scheduler actor, driven through its handle with in-memory executor
//! channels: no sockets.

use std::time::{Duration, Instant};

use sluice_proto as pb;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::scheduler::{AttachRefused, Scheduler, TaskOutcome};
use crate::metrics::Metrics;

const EPOCH: u64 = 7;

fn scheduler(timeout: Duration) -> (Scheduler, CancellationToken) {
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let s = Scheduler::spawn(
        EPOCH,
        timeout,
        Metrics::new().unwrap(),
        cancel.clone(),
        &tracker,
        None,
    );
    (s, cancel)
}

fn task(id: &str) -> pb::TaskAssignment {
    pb::TaskAssignment {
        task_id: id.into(),
        epoch: EPOCH,
        ..Default::default()
    }
}

fn ok(id: &str, rows: u64) -> pb::TaskResult {
    pb::TaskResult {
        task_id: id.into(),
        epoch: EPOCH,
        outcome: Some(pb::task_result::Outcome::Ok(pb::TaskOutput {
            rows,
            ..Default::default()
        })),
    }
}

/// Runs task `id` through the scheduler in the background.
fn submit(s: &Scheduler, id: &str) -> tokio::task::JoinHandle<TaskOutcome> {
    let (s, task) = (s.clone(), task(id));
    tokio::spawn(async move { s.run_task(task).await })
}

type Rx = mpsc::Receiver<Result<pb::DriverMessage, tonic::Status>>;

async fn next_task(rx: &mut Rx) -> pb::TaskAssignment {
    let msg = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
    match msg
        .expect("a message within 2 s")
        .expect("open")
        .expect("ok")
        .kind
    {
        Some(pb::driver_message::Kind::Task(t)) => t,
        other => panic!("expected a task, got {other:?}"),
    }
}

#[tokio::test]
async fn a_task_runs_on_an_executor_and_its_result_comes_back() {
    let (s, _cancel) = scheduler(Duration::from_secs(5));
    let (tx, mut rx) = mpsc::channel(16);
    let key = s.attach("e1".into(), 1, 1, tx).await.unwrap();
    let run = submit(&s, "t1");
    assert_eq!(next_task(&mut rx).await.task_id, "t1");
    // A result from another connection or epoch is ignored.
    s.result(key + 100, ok("t1", 1));
    s.result(
        key,
        pb::TaskResult {
            epoch: EPOCH - 1,
            ..ok("t1", 2)
        },
    );
    s.result(key, ok("t1", 3));
    match run.await.unwrap() {
        TaskOutcome::Done(out) => assert_eq!(out.rows, 3),
        other => panic!("expected done, got {other:?}"),
    }
}

#[tokio::test]
async fn slots_bound_the_tasks_an_executor_holds() {
    let (s, _cancel) = scheduler(Duration::from_secs(5));
    let (tx, mut rx) = mpsc::channel(16);
    let key = s.attach("e1".into(), 1, 1, tx).await.unwrap();
    let first = submit(&s, "t1");
    let second = submit(&s, "t2");
    let got = next_task(&mut rx).await.task_id;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .is_err(),
        "a second task must wait for the only slot"
    );
    s.result(key, ok(&got, 1));
    let other = next_task(&mut rx).await.task_id;
    assert_ne!(got, other);
    s.result(key, ok(&other, 1));
    assert!(matches!(first.await.unwrap(), TaskOutcome::Done(_)));
    assert!(matches!(second.await.unwrap(), TaskOutcome::Done(_)));
}

#[tokio::test]
async fn a_lost_executor_loses_its_tasks_at_once() {
    let (s, _cancel) = scheduler(Duration::from_secs(5));
    let (tx, mut rx) = mpsc::channel(16);
    let key = s.attach("e1".into(), 2, 1, tx).await.unwrap();
    let run = submit(&s, "t1");
    next_task(&mut rx).await;
    s.detach(key, "stream closed");
    let outcome = tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(outcome, TaskOutcome::Lost(_)), "{outcome:?}");
}

#[tokio::test]
async fn an_executor_without_heartbeats_times_out() {
    let (s, _cancel) = scheduler(Duration::from_millis(200));
    let (tx, mut rx) = mpsc::channel(16);
    s.attach("e1".into(), 1, 1, tx).await.unwrap();
    let run = submit(&s, "t1");
    next_task(&mut rx).await;
    let outcome = tokio::time::timeout(Duration::from_secs(2), run)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(outcome, TaskOutcome::Lost(_)), "{outcome:?}");
    assert!(s.executors().await.is_empty(), "the executor is gone");
}

#[tokio::test]
async fn a_withdrawn_task_is_cancelled_on_its_executor() {
    let (s, _cancel) = scheduler(Duration::from_secs(5));
    let (tx, mut rx) = mpsc::channel(16);
    s.attach("e1".into(), 1, 1, tx).await.unwrap();
    let run = submit(&s, "t1");
    next_task(&mut rx).await;
    s.cancel("t1".into());
    let msg = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .unwrap();
    match msg.unwrap().unwrap().kind {
        Some(pb::driver_message::Kind::Cancel(c)) => assert_eq!(c.task_id, "t1"),
        other => panic!("expected a cancel, got {other:?}"),
    }
    run.abort();
    // The slot is free again.
    let again = submit(&s, "t2");
    assert_eq!(next_task(&mut rx).await.task_id, "t2");
    again.abort();
}

#[tokio::test]
async fn queued_tasks_wait_for_an_executor() {
    let (s, _cancel) = scheduler(Duration::from_secs(5));
    let run = submit(&s, "t1");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (tx, mut rx) = mpsc::channel(16);
    let key = s.attach("late".into(), 1, 1, tx).await.unwrap();
    assert_eq!(next_task(&mut rx).await.task_id, "t1");
    s.result(key, ok("t1", 5));
    assert!(matches!(run.await.unwrap(), TaskOutcome::Done(_)));
}

#[tokio::test]
async fn nothing_is_dispatched_on_a_stale_lease() {
    use crate::leader::lease::LeaseClock;
    use std::sync::Arc;
    let cancel = CancellationToken::new();
    let ttl = Duration::from_secs(3);
    let granted = Instant::now()
        .checked_sub(Duration::from_secs(10))
        .expect("uptime");
    let lease = Arc::new(LeaseClock::new(ttl, granted));
    let s = Scheduler::spawn(
        EPOCH,
        ttl,
        Metrics::new().unwrap(),
        cancel,
        &TaskTracker::new(),
        Some(lease.clone()),
    );
    let (tx, mut rx) = mpsc::channel(16);
    s.attach("e1".into(), 1, 1, tx).await.unwrap();
    let run = submit(&s, "t1");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rx.recv())
            .await
            .is_err(),
        "a leader whose lease is stale must not dispatch"
    );
    // A renewal makes it fresh again; the next event dispatches.
    lease.renewed(Instant::now());
    s.heartbeat(99);
    assert_eq!(next_task(&mut rx).await.task_id, "t1");
    run.abort();
}

#[tokio::test]
async fn a_newer_process_replaces_an_older_one_with_its_id_once() {
    let (s, _cancel) = scheduler(Duration::from_secs(5));
    let (old_tx, mut old_rx) = mpsc::channel(16);
    s.attach("dup".into(), 1, 10, old_tx).await.unwrap();
    let (new_tx, _new_rx) = mpsc::channel(16);
    s.attach("dup".into(), 1, 20, new_tx).await.unwrap();
    let told = tokio::time::timeout(Duration::from_secs(2), old_rx.recv())
        .await
        .expect("the replaced stream hears of it")
        .expect("a message");
    let status = told.expect_err("a status");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(status.message().contains("replaced"), "{status:?}");
    // The older process comes back: refused, and the newer keeps the id.
    let (again_tx, _again_rx) = mpsc::channel(16);
    let AttachRefused::Conflict(refused) =
        s.attach("dup".into(), 1, 10, again_tx).await.unwrap_err()
    else {
        panic!("a conflict");
    };
    assert!(
        refused.contains("refused") && refused.contains("dup"),
        "{refused}"
    );
    let list = s.executors().await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].incarnation, 20);
    assert!(list[0].conflict.contains("two processes"), "{list:?}");
}

#[tokio::test]
async fn a_hello_to_a_stopped_scheduler_is_not_a_conflict() {
    let (s, cancel) = scheduler(Duration::from_secs(5));
    cancel.cancel();
    // The actor may take a moment to stop; then every hello is refused as
    // `Stopped` (retryable), never as a conflict (which stops an executor).
    let deadline = Instant::now() + Duration::from_secs(5);
    for n in 0u64.. {
        let (tx, _rx) = mpsc::channel(16);
        match s.attach(format!("e{n}"), 1, 1, tx).await {
            Err(refused) => {
                assert_eq!(refused, AttachRefused::Stopped);
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "the scheduler never stopped"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
