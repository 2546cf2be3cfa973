//! What an executor reports is checked where the driver can check it. A
//! rogue executor (a real gRPC client of the ClusterService, with valid
//! credentials: here the port is open) that reports rows written with no
//! file fails the query, naming the batch and the rows, instead of
//! committing an empty batch; one whose incarnation starts after the
//! driver's clock is refused at attach, so it cannot lock out the real
//! executor of its id.

use std::time::Duration;

use sluice_proto::cluster_service_client::ClusterServiceClient;
use sluice_proto::{
    DriverMessage, ExecutorMessage, Hello, TaskOutput, TaskResult, driver_message,
    executor_message, task_result, task_source,
};
use sluice_tests::{Cluster, QueryState, Spec};
use tokio_stream::StreamExt;

fn hello(id: &str, incarnation: u64) -> ExecutorMessage {
    ExecutorMessage {
        kind: Some(executor_message::Kind::Hello(Hello {
            executor_id: id.into(),
            slots: 4,
            max_epoch_seen: 0,
            incarnation,
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_executors_reports_are_checked() {
    let cluster = Cluster::new("rogue");
    let driver = cluster.start_ready_driver().await;
    let url = format!("http://{}", driver.addr());

    // An incarnation far in the future is refused.
    let mut rpc = ClusterServiceClient::connect(url.clone()).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(hello("rogue", u64::MAX)).await.unwrap();
    let refused = match rpc
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Err(status) => status.message().to_string(),
        Ok(resp) => {
            let mut stream = resp.into_inner();
            match stream.next().await {
                Some(Err(status)) => status.message().to_string(),
                other => panic!("an incarnation from the future was welcomed: {other:?}"),
            }
        }
    };
    assert!(refused.contains("after this driver's clock"), "{refused}");

    // A plausible one attaches, takes a task, and reports rows but no file.
    let now = u64::try_from(sluice_common::time::now_ms()).unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(hello("rogue", now << 16)).await.unwrap();
    let mut stream = rpc
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("attach")
        .into_inner();
    let spec = Spec::new("q", &cluster.sink_path("q"))
        .partitions(1)
        .total_rows(100);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    let task = loop {
        let msg: DriverMessage = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("a task within 30 s")
            .expect("the stream is open")
            .expect("a message");
        if let Some(driver_message::Kind::Task(t)) = msg.kind {
            break t;
        }
    };
    // The rows the task's range holds (one partition: all of them).
    let planned = match task.source.and_then(|s| s.kind) {
        Some(task_source::Kind::Rate(r)) => r.end_value - r.start_value,
        other => panic!("a rate task, not {other:?}"),
    };
    let forged = TaskResult {
        task_id: task.task_id.clone(),
        epoch: task.epoch,
        outcome: Some(task_result::Outcome::Ok(TaskOutput {
            rows: 100,
            input_rows: planned,
            sink: None,
            ..Default::default()
        })),
    };
    tx.send(ExecutorMessage {
        kind: Some(executor_message::Kind::Result(forged)),
    })
    .await
    .unwrap();
    let failed = client
        .wait_state("q", QueryState::Failed, Duration::from_secs(30))
        .await;
    for w in ["batch 0", "reported 100 rows written", "hold 0"] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    assert_eq!(failed.last_committed_batch, -1, "{failed:#?}");
}
