//! The scheduler: one actor per leader term that owns executor membership
//! and every task attempt in flight. Runners submit attempts and await their
//! outcome; attach streams feed it heartbeats and results.
//!
//! ```text
//!  runner ──Submit(task, reply)──►┐
//!  attach stream ──Attached/──────┤   scheduler actor ──TaskAssignment──► executor stream
//!     Heartbeat/Result/Detached ──┘    (placement, timeouts)
//!                                     reply: Done | Failed(kind) | Lost
//! ```
//!
//! Invariants: an attempt is running on at most one executor; an executor
//! never holds more attempts than its slots; when an executor is lost (its
//! stream closed or no heartbeat within the timeout) every attempt it held
//! is answered `Lost` at once, so the runner can retry it elsewhere.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_proto as pb;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::identity::{self, Admit};
use super::placement::{Capacity, Want, place};
use crate::leader::lease::LeaseClock;
use crate::metrics::Metrics;

pub type ExecutorTx = mpsc::Sender<Result<pb::DriverMessage, tonic::Status>>;

/// How one task attempt ended.
#[derive(Debug, Clone)]
pub enum TaskOutcome {
    Done(pb::TaskOutput),
    Failed(pb::TaskError),
    /// The executor went away before it answered.
    Lost(String),
}

enum Event {
    Attached(Attach),
    Heartbeat {
        key: u64,
    },
    Result {
        key: u64,
        result: pb::TaskResult,
    },
    Detached {
        key: u64,
        reason: String,
    },
    Submit {
        task: Box<pb::TaskAssignment>,
        reply: oneshot::Sender<TaskOutcome>,
    },
    Cancel {
        task_id: String,
    },
    Snapshot {
        reply: oneshot::Sender<Vec<pb::ExecutorInfo>>,
    },
}

/// A hello: an executor connection that asks to be attached.
struct Attach {
    key: u64,
    id: String,
    slots: u32,
    incarnation: u64,
    tx: ExecutorTx,
    reply: oneshot::Sender<Result<(), String>>,
}

/// A handle to the scheduler actor.
/// Why an executor was not attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachRefused {
    /// Another process holds the id (see [`identity`]): the executor stops.
    Conflict(String),
    /// The scheduler stopped: its term is ending. Not the executor's fault:
    /// it tries again, and finds the next leader.
    Stopped,
}

#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::UnboundedSender<Event>,
    next_key: Arc<AtomicU64>,
}

struct Executor {
    id: String,
    slots: u32,
    incarnation: u64,
    tx: ExecutorTx,
    running: Vec<String>,
    last_heartbeat: Instant,
}

/// A submitted attempt not yet dispatched.
struct Pending {
    task: pb::TaskAssignment,
    reply: oneshot::Sender<TaskOutcome>,
    since: Instant,
}

/// How long a task waits for the busy executor that holds its state
/// before it goes elsewhere and reloads the state there.
const LOCALITY_WAIT: Duration = Duration::from_millis(1000);

struct Running {
    key: u64,
    reply: oneshot::Sender<TaskOutcome>,
    affinity: Option<String>,
}

struct Actor {
    epoch: u64,
    /// Tasks are dispatched only while this lease is fresh.
    lease: Option<Arc<LeaseClock>>,
    timeout: Duration,
    metrics: Metrics,
    executors: HashMap<u64, Executor>,
    pending: VecDeque<Pending>,
    running: HashMap<String, Running>,
    /// The last conflict over each executor id (see [`identity`]).
    conflicts: HashMap<String, String>,
    /// State affinity: the executor id that last completed each stateful
    /// query's reduce task of a partition, which holds its state.
    holders: HashMap<String, String>,
}

/// The state a task works on, for affinity: a reduce task's (query,
/// operator, partition).
fn affinity(task: &pb::TaskAssignment) -> Option<String> {
    task.state()
        .map(|w| format!("{}/{}/{}", task.query_id, w.operator, task.partition))
}

impl Scheduler {
    /// Starts the actor; it runs until `cancel` fires.
    pub fn spawn(
        epoch: u64,
        timeout: Duration,
        metrics: Metrics,
        cancel: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
        lease: Option<Arc<LeaseClock>>,
    ) -> Scheduler {
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Actor {
            epoch,
            lease,
            timeout,
            metrics,
            executors: HashMap::new(),
            pending: VecDeque::new(),
            running: HashMap::new(),
            conflicts: HashMap::new(),
            holders: HashMap::new(),
        };
        tracker.spawn(actor.run(rx, cancel));
        Scheduler {
            tx,
            next_key: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Registers an attached executor and returns its connection key, or
    /// refuses it with the reason (an older process with a taken id; see
    /// [`identity`]).
    pub async fn attach(
        &self,
        id: String,
        slots: u32,
        incarnation: u64,
        tx: ExecutorTx,
    ) -> Result<u64, AttachRefused> {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let event = Event::Attached(Attach {
            key,
            id,
            slots,
            incarnation,
            tx,
            reply,
        });
        if self.tx.send(event).is_err() {
            return Err(AttachRefused::Stopped);
        }
        match answer.await {
            Ok(Ok(())) => Ok(key),
            Ok(Err(conflict)) => Err(AttachRefused::Conflict(conflict)),
            Err(_) => Err(AttachRefused::Stopped),
        }
    }

    pub fn heartbeat(&self, key: u64) {
        let _ = self.tx.send(Event::Heartbeat { key });
    }

    pub fn result(&self, key: u64, result: pb::TaskResult) {
        let _ = self.tx.send(Event::Result { key, result });
    }

    pub fn detach(&self, key: u64, reason: impl Into<String>) {
        let _ = self.tx.send(Event::Detached {
            key,
            reason: reason.into(),
        });
    }

    /// Runs one attempt and waits for its outcome.
    pub async fn run_task(&self, task: pb::TaskAssignment) -> TaskOutcome {
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(Event::Submit {
                task: Box::new(task),
                reply,
            })
            .is_err()
        {
            return TaskOutcome::Lost("scheduler stopped".into());
        }
        rx.await
            .unwrap_or_else(|_| TaskOutcome::Lost("scheduler stopped".into()))
    }

    /// Withdraws an attempt: dropped if queued, cancelled on its executor if running.
    pub fn cancel(&self, task_id: String) {
        let _ = self.tx.send(Event::Cancel { task_id });
    }

    /// The executors attached now.
    pub async fn executors(&self) -> Vec<pb::ExecutorInfo> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Event::Snapshot { reply }).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>, cancel: CancellationToken) {
        // Often enough that a task that waited for its state's executor
        // is placed soon after its wait ends.
        let tick_every = (self.timeout / 4).clamp(Duration::from_millis(50), LOCALITY_WAIT / 4);
        let mut tick = tokio::time::interval(tick_every);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                ev = rx.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    None => break,
                },
                _ = tick.tick() => self.expire(),
            }
            self.dispatch();
            self.publish_gauges();
        }
        self.metrics.executors.set(0);
        self.metrics.slots.set(0);
        self.metrics.slots_in_use.set(0);
        debug!(epoch = self.epoch, "scheduler stopped");
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Attached(attach) => self.attach(attach),
            Event::Heartbeat { key } => {
                if let Some(e) = self.executors.get_mut(&key) {
                    e.last_heartbeat = Instant::now();
                }
            }
            Event::Result { key, result } => self.complete(key, result),
            Event::Detached { key, reason } => self.lose(key, &reason),
            Event::Submit { task, reply } => self.pending.push_back(Pending {
                task: *task,
                reply,
                since: Instant::now(),
            }),
            Event::Cancel { task_id } => self.withdraw(&task_id),
            Event::Snapshot { reply } => {
                let now = Instant::now();
                let list = self
                    .executors
                    .values()
                    .map(|e| pb::ExecutorInfo {
                        id: e.id.clone(),
                        slots: e.slots,
                        running_tasks: e.running.len() as u32,
                        heartbeat_age_ms: now.duration_since(e.last_heartbeat).as_millis() as u64,
                        incarnation: e.incarnation,
                        conflict: self.conflicts.get(&e.id).cloned().unwrap_or_default(),
                    })
                    .collect();
                let _ = reply.send(list);
            }
        }
        self.metrics.executors.set(self.executors.len() as i64);
    }

    /// One process per executor id (see [`identity`]).
    fn attach(&mut self, a: Attach) {
        let Attach {
            key,
            id,
            slots,
            incarnation,
            tx,
            reply,
        } = a;
        let now_ms = u64::try_from(sluice_common::time::now_ms()).unwrap_or(0);
        if !identity::plausible(incarnation, now_ms) {
            warn!(executor = %id, incarnation, "executor refused: its incarnation starts in the future");
            let _ = reply.send(Err(format!(
                "refused: incarnation {incarnation} starts more than {} min after this driver's clock",
                identity::MAX_CLOCK_SKEW_MS / 60_000
            )));
            return;
        }
        let attached = self.executors.iter().find(|(_, e)| e.id == id);
        let (old, old_incarnation) =
            attached.map_or((None, None), |(k, e)| (Some(*k), Some(e.incarnation)));
        match identity::admit(old_incarnation, incarnation) {
            Admit::Fresh => {}
            Admit::Reconnect => {
                if let Some(old) = old {
                    self.lose(old, "reconnected on a new stream");
                }
            }
            Admit::Replace { older } => {
                let msg = identity::conflict_message(&id, older, incarnation);
                warn!(executor = %id, older, newer = incarnation, "executor id taken over by a newer process");
                if let Some(e) = old.and_then(|k| self.executors.get(&k)) {
                    let _ =
                        e.tx.try_send(Err(tonic::Status::failed_precondition(format!(
                            "replaced: {msg}"
                        ))));
                }
                if let Some(old) = old {
                    self.lose(old, "replaced by a newer process");
                }
                self.conflicts.insert(id.clone(), msg);
            }
            Admit::Refuse { newer } => {
                let msg = identity::conflict_message(&id, incarnation, newer);
                warn!(executor = %id, older = incarnation, newer, "older executor process refused");
                self.conflicts.insert(id.clone(), msg.clone());
                let _ = reply.send(Err(format!("refused: {msg}")));
                return;
            }
        }
        info!(executor = %id, slots, incarnation, epoch = self.epoch, "executor attached");
        let ex = Executor {
            id,
            slots,
            incarnation,
            tx,
            running: Vec::new(),
            last_heartbeat: Instant::now(),
        };
        self.executors.insert(key, ex);
        let _ = reply.send(Ok(()));
    }

    fn complete(&mut self, key: u64, result: pb::TaskResult) {
        if result.epoch != self.epoch {
            debug!(task = %result.task_id, epoch = result.epoch, "result from another epoch ignored");
            return;
        }
        let Some(run) = self.running.remove(&result.task_id) else {
            return;
        };
        if run.key != key {
            self.running.insert(result.task_id, run);
            return;
        }
        if let Some(e) = self.executors.get_mut(&key) {
            e.running.retain(|t| t != &result.task_id);
        }
        let outcome = match result.outcome {
            Some(pb::task_result::Outcome::Ok(out)) => {
                if let (Some(a), Some(e)) = (run.affinity, self.executors.get(&key)) {
                    self.holders.insert(a, e.id.clone());
                }
                TaskOutcome::Done(out)
            }
            Some(pb::task_result::Outcome::Error(err)) => TaskOutcome::Failed(err),
            None => TaskOutcome::Failed(pb::TaskError {
                kind: pb::ErrorKind::Retryable as i32,
                message: "executor sent an empty result".into(),
            }),
        };
        let _ = run.reply.send(outcome);
    }

    fn lose(&mut self, key: u64, reason: &str) {
        let Some(e) = self.executors.remove(&key) else {
            return;
        };
        warn!(executor = %e.id, reason, running = e.running.len(), "executor lost");
        self.metrics.executors_lost.inc();
        for task_id in e.running {
            if let Some(run) = self.running.remove(&task_id) {
                let _ = run.reply.send(TaskOutcome::Lost(format!(
                    "executor {} lost: {reason}",
                    e.id
                )));
            }
        }
        self.metrics.executors.set(self.executors.len() as i64);
    }

    /// The executors, their slots and the slots in use, as they are now.
    fn publish_gauges(&self) {
        let m = &self.metrics;
        m.executors.set(self.executors.len() as i64);
        let slots: u64 = self.executors.values().map(|e| u64::from(e.slots)).sum();
        let busy: usize = self.executors.values().map(|e| e.running.len()).sum();
        m.slots.set(slots as i64);
        m.slots_in_use.set(busy as i64);
    }

    fn withdraw(&mut self, task_id: &str) {
        self.pending.retain(|p| p.task.task_id != task_id);
        if let Some(run) = self.running.remove(task_id)
            && let Some(e) = self.executors.get_mut(&run.key)
        {
            e.running.retain(|t| t != task_id);
            let cancel = pb::CancelTask {
                task_id: task_id.to_string(),
            };
            let msg = pb::DriverMessage {
                kind: Some(pb::driver_message::Kind::Cancel(cancel)),
            };
            let _ = e.tx.try_send(Ok(msg));
        }
    }

    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .executors
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_heartbeat) > self.timeout)
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            self.lose(key, "no heartbeat within the executor timeout");
        }
    }

    fn dispatch(&mut self) {
        self.pending.retain(|p| !p.reply.is_closed());
        if self.pending.is_empty() || self.lease.as_ref().is_some_and(|l| !l.fresh()) {
            return;
        }
        let caps: Vec<Capacity> = self
            .executors
            .iter()
            .map(|(k, e)| Capacity {
                key: *k,
                slots: e.slots,
                running: e.running.len() as u32,
            })
            .collect();
        let now = Instant::now();
        let wants: Vec<Want> = self
            .pending
            .iter()
            .map(|p| {
                let prefer = affinity(&p.task)
                    .and_then(|a| self.holders.get(&a))
                    .and_then(|holder| {
                        self.executors
                            .iter()
                            .find(|(_, e)| &e.id == holder)
                            .map(|(k, _)| *k)
                    });
                Want {
                    prefer,
                    wait: now.duration_since(p.since) < LOCALITY_WAIT,
                }
            })
            .collect();
        let placed = place(&wants, &caps);
        let mut waiting = VecDeque::with_capacity(self.pending.len());
        let pending = std::mem::take(&mut self.pending);
        for (p, key) in pending.into_iter().zip(placed) {
            let Some(key) = key else {
                waiting.push_back(p);
                continue;
            };
            let Some(e) = self.executors.get_mut(&key) else {
                waiting.push_back(p);
                continue;
            };
            let Pending { task, reply, .. } = p;
            let task_id = task.task_id.clone();
            let affinity = affinity(&task);
            let msg = pb::DriverMessage {
                kind: Some(pb::driver_message::Kind::Task(task)),
            };
            if e.tx.try_send(Ok(msg)).is_err() {
                let _ = reply.send(TaskOutcome::Lost(format!("executor {} unreachable", e.id)));
                self.lose(key, "its stream is closed or full");
                continue;
            }
            debug!(task = %task_id, executor = %e.id, "task dispatched");
            e.running.push(task_id.clone());
            self.running.insert(
                task_id,
                Running {
                    key,
                    reply,
                    affinity,
                },
            );
        }
        self.pending = waiting;
    }
}
