//! One attached stream to one driver: hello, heartbeats, task dispatch,
//! results, cancellation and the graceful drain.
//!
//! ```text
//!   executor                                   driver
//!   ────────                                   ──────
//!   Hello{id, slots, max_epoch_seen} ────────►
//!                                    ◄──────── Welcome{driver_id, epoch}
//!   Heartbeat{running} every --heartbeat-ms ─►
//!                                    ◄──────── TaskAssignment / CancelTask
//!   TaskResult{ok | error} ──────────────────►
//! ```
//!
//! The session owns every task it starts (a [`Runner`]). When the stream
//! breaks they are aborted, because the driver retries them elsewhere. On
//! shutdown the session drains: it refuses new tasks as retryable, waits up
//! to [`DRAIN_TIMEOUT`] for the running ones to report, then half-closes the
//! stream and waits briefly for the driver to end its side.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_proto::{
    DriverMessage, ExecutorMessage, Heartbeat, Hello, TaskAssignment, driver_message,
    executor_message::Kind,
};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep_until};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tracing::{debug, info, info_span, warn};

use crate::Shared;
use crate::error::ExecutorError;
use crate::runner::Runner;
use crate::task::{Admission, admit, error_result};

/// The client of one driver connection: every call carries the token.
pub type Client = sluice_proto::cluster_service_client::ClusterServiceClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        sluice_common::tls::Bearer,
    >,
>;

/// How long a shutdown waits for running tasks to deliver their results.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a drained session waits for the driver to close its side.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
const OUTBOX: usize = 256;

/// Why a session ended.
#[derive(Debug)]
pub(crate) enum SessionEnd {
    /// Shutdown was requested and the drain is over: stop.
    Drained,
    /// The stream failed; `welcomed` says whether it got as far as Welcome.
    Lost {
        welcomed: bool,
        error: ExecutorError,
    },
}

struct Session<'a> {
    shared: &'a Shared,
    addr: &'a str,
    outbox: mpsc::Sender<ExecutorMessage>,
    tasks: Runner,
    welcomed: bool,
    draining: bool,
}

/// Attaches over `client` and serves the stream until it breaks or a
/// shutdown has drained.
pub(crate) async fn run(
    shared: &Shared,
    addr: &str,
    mut client: Client,
    shutdown: &CancellationToken,
) -> SessionEnd {
    let (outbox, requests) = mpsc::channel(OUTBOX);
    let hello = Kind::Hello(Hello {
        executor_id: shared.config.id.clone(),
        slots: shared.config.slots,
        max_epoch_seen: shared.max_epoch.load(Ordering::SeqCst),
        incarnation: shared.incarnation,
    });
    let mut session = Session {
        shared,
        addr,
        outbox,
        tasks: Runner::new(
            shared.slots.clone(),
            shared.sinks.clone(),
            shared.tasks.handle().clone(),
        ),
        welcomed: false,
        draining: false,
    };
    if let Err(error) = session.send(hello).await {
        return session.lost(error);
    }
    let attached = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return SessionEnd::Drained,
        r = client.attach(ReceiverStream::new(requests)) => r,
    };
    let mut inbound = match attached {
        Ok(response) => response.into_inner(),
        Err(status) => {
            return session.lost(ExecutorError::Rpc {
                addr: addr.into(),
                status,
            });
        }
    };
    let end = session.pump(&mut inbound, shutdown).await;
    let Session { outbox, tasks, .. } = session;
    // Anything still running is abandoned: the driver retries it.
    tasks.shutdown().await;
    drop(outbox);
    if matches!(end, SessionEnd::Drained) {
        close_gracefully(&mut inbound).await;
        info!(driver = %addr, "detached");
    }
    end
}

/// After our side is closed, lets the driver read the last results and end
/// its side, for at most [`CLOSE_GRACE`].
async fn close_gracefully(inbound: &mut Streaming<DriverMessage>) {
    let deadline = Instant::now() + CLOSE_GRACE;
    loop {
        tokio::select! {
            biased;
            _ = sleep_until(deadline) => return,
            m = inbound.message() => if !matches!(m, Ok(Some(_))) { return },
        }
    }
}

impl Session<'_> {
    async fn pump(
        &mut self,
        inbound: &mut Streaming<DriverMessage>,
        shutdown: &CancellationToken,
    ) -> SessionEnd {
        let every = self.shared.config.heartbeat;
        let mut heartbeat = interval_at(Instant::now() + every, every);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut drain_deadline = Instant::now();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled(), if !self.draining => {
                    self.draining = true;
                    drain_deadline = Instant::now() + DRAIN_TIMEOUT;
                    info!(driver = %self.addr, running = self.tasks.len(), "draining");
                    if let Err(e) = self.refuse_queued().await {
                        return self.lost(e);
                    }
                    if self.tasks.is_idle() {
                        return SessionEnd::Drained;
                    }
                }
                _ = sleep_until(drain_deadline), if self.draining => {
                    warn!(abandoned = self.tasks.len(), "drain timed out");
                    return SessionEnd::Drained;
                }
                Some(result) = self.tasks.next_finished(), if !self.tasks.is_idle() => {
                    if let Err(e) = self.send(Kind::Result(result)).await {
                        return self.lost(e);
                    }
                    if self.draining && self.tasks.is_idle() {
                        return SessionEnd::Drained;
                    }
                }
                msg = inbound.message() => {
                    let handled = match msg {
                        Ok(Some(m)) => self.handle(m).await,
                        Ok(None) => Err(ExecutorError::StreamClosed { addr: self.addr.into() }),
                        Err(status) => Err(ExecutorError::Rpc { addr: self.addr.into(), status }),
                    };
                    if let Err(e) = handled {
                        return self.lost(e);
                    }
                }
                _ = heartbeat.tick() => {
                    let running_tasks = u32::try_from(self.tasks.len()).unwrap_or(u32::MAX);
                    if let Err(e) = self.send(Kind::Heartbeat(Heartbeat { running_tasks })).await {
                        return self.lost(e);
                    }
                }
            }
        }
    }

    async fn handle(&mut self, msg: DriverMessage) -> Result<(), ExecutorError> {
        match msg.kind {
            Some(driver_message::Kind::Welcome(w)) => {
                let before = self.shared.max_epoch.fetch_max(w.epoch, Ordering::SeqCst);
                self.welcomed = true;
                if w.epoch < before {
                    warn!(driver = %self.addr, driver_id = %w.driver_id, epoch = w.epoch,
                        max_seen = before, "driver epoch is stale; its tasks will be refused");
                } else {
                    info!(driver = %self.addr, driver_id = %w.driver_id, epoch = w.epoch,
                        slots = self.shared.config.slots, "attached");
                }
                Ok(())
            }
            Some(driver_message::Kind::Task(t)) => self.assign(t).await,
            Some(driver_message::Kind::Cancel(c)) => {
                if self.tasks.cancel(&c.task_id) {
                    info!(task = %c.task_id, "task cancelled");
                } else {
                    debug!(task = %c.task_id, "cancel for a task not running");
                }
                Ok(())
            }
            None => {
                // A message kind from a newer driver: ignore, stay attached.
                debug!(driver = %self.addr, "unknown driver message ignored");
                Ok(())
            }
        }
    }

    async fn assign(&mut self, t: TaskAssignment) -> Result<(), ExecutorError> {
        let span = info_span!("task", task = %t.task_id, query = %t.query_name,
            batch = t.batch_id, partition = t.partition, attempt = t.attempt, epoch = t.epoch);
        if self.draining {
            span.in_scope(|| info!("refused: executor draining"));
            let refusal = error_result(&t.task_id, t.epoch, &ExecutorError::Draining);
            return self.send(Kind::Result(refusal)).await;
        }
        let max_seen = self.shared.max_epoch.load(Ordering::SeqCst);
        if let Admission::Stale { max_seen } = admit(t.epoch, max_seen) {
            span.in_scope(|| warn!(max_seen, "refused: stale epoch"));
            let stale = ExecutorError::StaleEpoch {
                task_epoch: t.epoch,
                max_seen,
            };
            return self
                .send(Kind::Result(error_result(&t.task_id, t.epoch, &stale)))
                .await;
        }
        self.shared.max_epoch.fetch_max(t.epoch, Ordering::SeqCst);
        if self.tasks.contains(&t.task_id) {
            span.in_scope(|| warn!("duplicate assignment ignored; the task is running"));
            return Ok(());
        }
        span.in_scope(|| debug!("task assigned"));
        self.tasks.submit(t);
        Ok(())
    }

    /// On drain: tasks that have not started go back to the driver.
    async fn refuse_queued(&mut self) -> Result<(), ExecutorError> {
        for t in self.tasks.take_queued() {
            let refusal = error_result(&t.task_id, t.epoch, &ExecutorError::Draining);
            self.send(Kind::Result(refusal)).await?;
        }
        Ok(())
    }

    async fn send(&self, kind: Kind) -> Result<(), ExecutorError> {
        let msg = ExecutorMessage { kind: Some(kind) };
        self.outbox
            .send(msg)
            .await
            .map_err(|_| ExecutorError::StreamClosed {
                addr: self.addr.into(),
            })
    }

    fn lost(&self, error: ExecutorError) -> SessionEnd {
        if self.tasks.len() > 0 {
            warn!(driver = %self.addr, aborted = self.tasks.len(),
                "stream lost; aborting running tasks");
        }
        SessionEnd::Lost {
            welcomed: self.welcomed,
            error,
        }
    }
}
