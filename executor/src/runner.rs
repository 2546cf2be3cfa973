//! The task table of one session: which tasks are queued, which are running,
//! and the slots they share.
//!
//! ```text
//!   submit ──► queue (FIFO) ──slot free?──► JoinSet (task::execute holds the permit)
//!                 │                               │ finished / panicked / aborted
//!   cancel ───────┴── drop or abort ◄─────────────┤
//!                                                 ▼
//!                                next_finished ─► TaskResult (none for cancelled)
//! ```
//!
//! Tasks start strictly in assignment order: a task takes a slot only when
//! every task assigned before it has one. They run on the executor's
//! [`TaskRuntime`], never on the session's threads. Dropping the runner
//! (or [`Runner::shutdown`]) aborts everything it owns.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sluice_proto::{TaskAssignment, TaskResult};
use tokio::sync::Semaphore;
use tokio::task::{AbortHandle, Id, JoinError, JoinSet};
use tracing::{Instrument, info_span, warn};

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::task::{self, error_result};

/// The most worker threads of the tasks' runtime: more slots share them.
const MAX_TASK_THREADS: u32 = 64;

/// The threads that run tasks: a runtime of their own, apart from the
/// one that heartbeats and talks to the driver.
///
/// Invariant: a task never delays a heartbeat. A task's query can keep
/// its thread busy for a long while between yields (one operator's step
/// over many rows); on a shared runtime, tasks filling every worker
/// thread would hold the session's heartbeats until the driver declared
/// the executor lost, failing every query on it.
pub(crate) struct TaskRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

impl TaskRuntime {
    /// A runtime with one worker thread per slot, up to [`MAX_TASK_THREADS`].
    pub(crate) fn new(slots: u32) -> Result<Self, ExecutorError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(slots.clamp(1, MAX_TASK_THREADS) as usize)
            .thread_name("sluice-task")
            .thread_stack_size(crate::THREAD_STACK_BYTES)
            .enable_all()
            .build()
            .map_err(|e| ExecutorError::Config(format!("cannot start the tasks' runtime: {e}")))?;
        Ok(TaskRuntime {
            runtime: Some(runtime),
        })
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the tasks' runtime lives until dropped")
            .handle()
    }
}

impl Drop for TaskRuntime {
    /// Ends whatever still runs there without waiting for it: the last
    /// owner may be on an async thread, where a runtime must not block.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for TaskRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskRuntime")
    }
}

/// Queued and running tasks, owned by one session.
pub(crate) struct Runner {
    slots: Arc<Semaphore>,
    sinks: Arc<Caches>,
    /// Where the tasks run.
    on: tokio::runtime::Handle,
    set: JoinSet<TaskResult>,
    queue: VecDeque<TaskAssignment>,
    /// Running tasks by task id.
    running: HashMap<String, AbortHandle>,
    /// Task id and epoch behind each join id, for panics and aborts.
    ids: HashMap<Id, (String, u64)>,
}

impl Runner {
    pub(crate) fn new(
        slots: Arc<Semaphore>,
        sinks: Arc<Caches>,
        on: tokio::runtime::Handle,
    ) -> Self {
        Runner {
            slots,
            sinks,
            on,
            set: JoinSet::new(),
            queue: VecDeque::new(),
            running: HashMap::new(),
            ids: HashMap::new(),
        }
    }

    /// Tasks assigned and not yet finished (queued or running).
    pub(crate) fn len(&self) -> usize {
        self.queue.len() + self.running.len()
    }

    /// True when nothing is queued or running.
    pub(crate) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.set.is_empty()
    }

    pub(crate) fn contains(&self, task_id: &str) -> bool {
        self.running.contains_key(task_id) || self.queue.iter().any(|t| t.task_id == task_id)
    }

    /// Queues an admitted task and starts it if a slot is free.
    pub(crate) fn submit(&mut self, task: TaskAssignment) {
        self.queue.push_back(task);
        self.start_ready();
    }

    /// Forgets a queued task or aborts a running one. No result follows.
    pub(crate) fn cancel(&mut self, task_id: &str) -> bool {
        if let Some(handle) = self.running.remove(task_id) {
            handle.abort();
            return true;
        }
        let before = self.queue.len();
        self.queue.retain(|t| t.task_id != task_id);
        self.queue.len() != before
    }

    /// Takes every task that has not started (to refuse them on drain).
    pub(crate) fn take_queued(&mut self) -> Vec<TaskAssignment> {
        self.queue.drain(..).collect()
    }

    /// The next result to report. Waits while tasks run; `None` when none
    /// do. Cancel-safe.
    pub(crate) async fn next_finished(&mut self) -> Option<TaskResult> {
        loop {
            let joined = self.set.join_next_with_id().await?;
            let result = self.settle(joined);
            self.start_ready();
            if result.is_some() {
                return result;
            }
        }
    }

    /// Aborts everything and waits for the futures to go.
    pub(crate) async fn shutdown(mut self) {
        self.queue.clear();
        self.set.shutdown().await;
    }

    fn start_ready(&mut self) {
        while !self.queue.is_empty() {
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                return;
            };
            let Some(t) = self.queue.pop_front() else {
                return;
            };
            let span = info_span!("task", task = %t.task_id, query = %t.query_name,
                batch = t.batch_id, partition = t.partition, attempt = t.attempt, epoch = t.epoch);
            let (task_id, epoch) = (t.task_id.clone(), t.epoch);
            let run = task::execute(t, permit, self.sinks.clone());
            let handle = self.set.spawn_on(run.instrument(span), &self.on);
            self.ids.insert(handle.id(), (task_id.clone(), epoch));
            self.running.insert(task_id, handle);
        }
    }

    /// The result to report for a joined future, if any.
    fn settle(&mut self, joined: Result<(Id, TaskResult), JoinError>) -> Option<TaskResult> {
        match joined {
            Ok((id, result)) => self.take(id).map(|_| result),
            Err(e) => {
                let (task_id, epoch) = self.take(e.id())?;
                if !e.is_panic() {
                    return None;
                }
                warn!(task = %task_id, epoch, "task panicked");
                let err = ExecutorError::TaskPanicked(e.to_string());
                Some(error_result(&task_id, epoch, &err))
            }
        }
    }

    /// Forgets the task behind join id `id`; its id and epoch if it was
    /// still wanted (not cancelled, not replaced by a newer assignment).
    fn take(&mut self, id: Id) -> Option<(String, u64)> {
        let (task_id, epoch) = self.ids.remove(&id)?;
        match self.running.get(&task_id) {
            Some(h) if h.id() == id => {
                self.running.remove(&task_id);
                Some((task_id, epoch))
            }
            _ => None,
        }
    }
}
