//! `ClusterService`: the executors' side of the driver. One bidirectional
//! stream per executor carries attach, heartbeats, tasks and results, so the
//! driver never dials an executor and dispatch never waits on a poll.
//!
//! ```text
//!  executor                          driver
//!  Hello{id, slots, incarnation} ──► attach to the scheduler (one process
//!                                    per id: see `identity`)
//!                  ◄─────────────── Welcome{epoch}
//!  Heartbeat ──────────────────────► liveness
//!                  ◄─────────────── TaskAssignment / CancelTask
//!  TaskResult ─────────────────────► scheduler → runner
//!  (stream closes) ────────────────► executor lost, its tasks retried
//! ```

use std::sync::Arc;
use std::time::Duration;

use sluice_proto as pb;
use sluice_proto::cluster_service_server::ClusterService;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;

use super::scheduler::AttachRefused;
use crate::error::DriverError;
use crate::state::Driver;

/// Heartbeat interval suggested to executors in `Welcome`.
const HEARTBEAT_MS: u64 = 1000;

pub struct ClusterApi {
    pub driver: Arc<Driver>,
}

#[tonic::async_trait]
impl ClusterService for ClusterApi {
    type AttachStream = ReceiverStream<Result<pb::DriverMessage, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<pb::ExecutorMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let term = self.driver.term()?;
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| DriverError::Invalid("no hello within 10 s".into()))??;
        let hello = match first.and_then(|m| m.kind) {
            Some(pb::executor_message::Kind::Hello(h)) => h,
            _ => {
                return Err(
                    DriverError::Invalid("the first message must be a hello".into()).into(),
                );
            }
        };
        if hello.executor_id.is_empty() || hello.slots == 0 {
            return Err(
                DriverError::Invalid("hello needs an executor_id and slots >= 1".into()).into(),
            );
        }
        let (tx, rx) = mpsc::channel(1024);
        let welcome = pb::Welcome {
            driver_id: self.driver.config.id.clone(),
            epoch: term.epoch,
            heartbeat_ms: HEARTBEAT_MS,
        };
        let msg = pb::DriverMessage {
            kind: Some(pb::driver_message::Kind::Welcome(welcome)),
        };
        tx.send(Ok(msg))
            .await
            .map_err(|_| DriverError::ShuttingDown)?;
        let key = term
            .scheduler
            .attach(
                hello.executor_id.clone(),
                hello.slots,
                hello.incarnation,
                tx,
            )
            .await
            .map_err(|refused| match refused {
                AttachRefused::Conflict(msg) => DriverError::FailedPrecondition(msg),
                // The term ends under this hello: retryable, unlike a
                // conflict, which tells the executor to stop.
                AttachRefused::Stopped => DriverError::Deposed { epoch: term.epoch },
            })?;
        let scheduler = term.scheduler.clone();
        let cancel = term.cancel.clone();
        term.tasks.spawn(async move {
            let reason = loop {
                let msg = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break "leader term ended".to_string(),
                    m = inbound.message() => m,
                };
                match msg {
                    Ok(Some(m)) => match m.kind {
                        Some(pb::executor_message::Kind::Heartbeat(_)) => scheduler.heartbeat(key),
                        Some(pb::executor_message::Kind::Result(r)) => {
                            scheduler.heartbeat(key);
                            scheduler.result(key, r);
                        }
                        Some(pb::executor_message::Kind::Hello(_)) | None => {}
                    },
                    Ok(None) => break "stream closed".to_string(),
                    Err(e) => break format!("stream error: {}", e.message()),
                }
            };
            debug!(executor = %hello.executor_id, reason = %reason, "attach stream ended");
            scheduler.detach(key, reason);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
