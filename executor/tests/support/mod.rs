//! A fake driver for the executor's protocol tests: a `ClusterService` on
//! 127.0.0.1:0 that either hands each Attach call to the test (leader) or
//! answers UNAVAILABLE with a `sluice-leader` hint (standby).
//!
//! ```text
//!  test ◄── Conn{inbound, outbound} ◄── Leader.attach ◄── executor
//!                     Standby.attach ──► UNAVAILABLE + sluice-leader: <leader>
//! ```

use std::time::Duration;

use sluice_proto::cluster_service_server::{ClusterService, ClusterServiceServer};
use sluice_proto::{
    DriverMessage, ErrorKind, ExecutorMessage, Hello, RateTask, SinkFormat, TaskAssignment,
    TaskOutput, TaskResult, TaskSink, TaskSource, Welcome, driver_message, executor_message,
    task_result::Outcome, task_source,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

pub const WAIT: Duration = Duration::from_secs(10);

/// One accepted Attach call, handed to the test.
pub struct Conn {
    inbound: Streaming<ExecutorMessage>,
    outbound: mpsc::Sender<Result<DriverMessage, Status>>,
}

pub enum Role {
    Leader(mpsc::Sender<Conn>),
    Standby { leader: String },
}

struct TestDriver(Role);

#[tonic::async_trait]
impl ClusterService for TestDriver {
    type AttachStream = ReceiverStream<Result<DriverMessage, Status>>;

    async fn attach(
        &self,
        req: Request<Streaming<ExecutorMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        match &self.0 {
            Role::Standby { leader } => {
                let mut s = Status::unavailable("not the leader");
                let hint = leader.parse().map_err(|_| Status::internal("bad hint"))?;
                s.metadata_mut()
                    .insert(sluice_proto::LEADER_METADATA_KEY, hint);
                Err(s)
            }
            Role::Leader(conns) => {
                let (tx, rx) = mpsc::channel(16);
                let conn = Conn {
                    inbound: req.into_inner(),
                    outbound: tx,
                };
                conns
                    .send(conn)
                    .await
                    .map_err(|_| Status::internal("test gone"))?;
                Ok(Response::new(ReceiverStream::new(rx)))
            }
        }
    }
}

pub async fn serve(role: Role) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ClusterServiceServer::new(TestDriver(role)))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr
}

impl Conn {
    pub async fn send(&self, kind: driver_message::Kind) {
        let msg = DriverMessage { kind: Some(kind) };
        self.outbound.send(Ok(msg)).await.unwrap();
    }

    /// The next message other than a heartbeat; `None` when the stream ends.
    pub async fn next(&mut self) -> Option<executor_message::Kind> {
        loop {
            let msg = timeout(WAIT, self.inbound.message())
                .await
                .expect("executor went silent")
                .ok()??;
            match msg.kind {
                Some(executor_message::Kind::Heartbeat(_)) => continue,
                other => return other,
            }
        }
    }

    pub async fn hello(&mut self) -> Hello {
        match self.next().await {
            Some(executor_message::Kind::Hello(h)) => h,
            other => panic!("expected Hello, got {other:?}"),
        }
    }

    pub async fn result(&mut self) -> TaskResult {
        match self.next().await {
            Some(executor_message::Kind::Result(r)) => r,
            other => panic!("expected a TaskResult, got {other:?}"),
        }
    }

    /// Waits for a heartbeat that reports `n` running tasks.
    pub async fn running(&mut self, n: u32) {
        loop {
            let msg = timeout(WAIT, self.inbound.message()).await.unwrap();
            match msg.unwrap().unwrap().kind {
                Some(executor_message::Kind::Heartbeat(h)) if h.running_tasks == n => return,
                Some(executor_message::Kind::Heartbeat(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

pub fn task(id: &str, epoch: u64, dir: &str, partitions: u32, end: u64) -> driver_message::Kind {
    driver_message::Kind::Task(TaskAssignment {
        task_id: id.into(),
        query_id: "q1".into(),
        query_name: "demo".into(),
        batch_id: 3,
        partition: 0,
        attempt: 0,
        epoch,
        source: Some(TaskSource {
            kind: Some(task_source::Kind::Rate(RateTask {
                partitions,
                rows_per_second: 1000,
                start_ms: 10_000,
                start_value: 0,
                end_value: end,
                partition_count: 1,
                first_partition: 0,
            })),
            table: String::new(),
        }),
        sink: Some(TaskSink {
            kind: Some(sluice_proto::task_sink::Kind::Files(
                sluice_proto::FilesTaskSink {
                    path: dir.into(),
                    format: SinkFormat::Jsonl.into(),
                    ..Default::default()
                },
            )),
        }),
        work: Some(sluice_proto::task_assignment::Work::Map(
            sluice_proto::MapWork {},
        )),
        plan: Some(sluice_proto::TaskPlan {
            sql: "SELECT * FROM input".into(),
            streams: vec![sluice_proto::StreamPlan {
                name: "input".into(),
                schema: sluice_sql::encode_schema(&sluice_common::rate::schema()),
            }],
            tables: Vec::new(),
            plan_budget_ms: 0,
            max_output_bytes: 0,
        }),
        ..Default::default()
    })
}

pub fn welcome(epoch: u64) -> driver_message::Kind {
    driver_message::Kind::Welcome(Welcome {
        driver_id: "test-driver".into(),
        epoch,
        heartbeat_ms: 1000,
    })
}

pub fn ok(r: &TaskResult) -> &TaskOutput {
    match &r.outcome {
        Some(Outcome::Ok(o)) => o,
        other => panic!("task {} failed: {other:?}", r.task_id),
    }
}

pub fn error_kind(r: &TaskResult) -> ErrorKind {
    match &r.outcome {
        Some(Outcome::Error(e)) => e.kind(),
        other => panic!("task {} did not fail: {other:?}", r.task_id),
    }
}
