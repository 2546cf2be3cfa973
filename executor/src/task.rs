//! Running one task, and the pure decisions around it.
//!
//! ```text
//! TaskAssignment ─admit(epoch)─► stale? ──► TaskResult{error: STALE_EPOCH}
//!        │ execute, in a slot: paths outside --allowed-paths? ──► TaskResult{error: FATAL}
//!        ├─ map ──────────► crate::map      (source ─► SQL ─► part files)
//!        ├─ shuffle_map ──► crate::shuffle  (source ─► the operator's rows ─► shuffle file)
//!        ├─ aggregate ────► crate::reduce with operator::Aggregate  (shuffle + state ─►
//!        ├─ dedup ────────► crate::reduce with operator::Dedup       state version, part files)
//!        └─ join ─────────► crate::reduce with operator::Join
//!                 │
//!   TaskResult{ok: TaskOutput} | TaskResult{error: kind}
//! ```
//!
//! A task is deterministic given its assignment (docs/design-notes.md, invariant 3): a
//! retry, a duplicate or a zombie attempt writes identical bytes or nothing.

use std::sync::Arc;
use std::time::Instant;

use sluice_proto::task_assignment::Work;
use sluice_proto::{
    ErrorKind, TaskAssignment, TaskError, TaskOutput, TaskResult, task_result::Outcome,
};
use tokio::sync::OwnedSemaphorePermit;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::map;
use crate::operator::{Aggregate, Dedup, Join, TopN};
use crate::reduce;

/// Whether a task may run, given the highest driver epoch seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Run it; the task's epoch becomes the highest seen if it is higher.
    Run,
    /// Refuse it: a newer driver has already spoken to this executor.
    Stale { max_seen: u64 },
}

/// Refuses work from an epoch lower than the highest one seen (docs/design-notes.md,
/// invariant 4: a deposed driver cannot make executors write).
pub fn admit(task_epoch: u64, max_seen: u64) -> Admission {
    if task_epoch < max_seen {
        Admission::Stale { max_seen }
    } else {
        Admission::Run
    }
}

/// The wire kind of a `sluice-common` error.
pub fn error_kind(err: &sluice_common::Error) -> ErrorKind {
    use sluice_common::Error as E;
    match err {
        E::Storage { .. } if err.is_retryable() => ErrorKind::Storage,
        E::Storage { .. } => ErrorKind::Fatal,
        // A broker that is down is waited for, as storage is.
        E::Kafka { .. } if err.is_retryable() => ErrorKind::Storage,
        E::Kafka { .. } | E::DataLoss(_) => ErrorKind::Fatal,
        // Tasks never call a catalog: the driver commits tables.
        E::Catalog { .. } if err.is_retryable() => ErrorKind::Retryable,
        E::Catalog { .. } => ErrorKind::Fatal,
        E::Conflict { .. }
        | E::Corrupt { .. }
        | E::InvalidSpec { .. }
        | E::Config(_)
        | E::Encoding(_) => ErrorKind::Fatal,
    }
}

/// The wire error of a failed task.
pub fn task_error(err: &ExecutorError) -> TaskError {
    let kind = match err {
        ExecutorError::Common(e) => error_kind(e),
        ExecutorError::StaleEpoch { .. } => ErrorKind::StaleEpoch,
        e if e.is_retryable() => ErrorKind::Retryable,
        _ => ErrorKind::Fatal,
    };
    TaskError {
        kind: kind.into(),
        message: err.to_string(),
    }
}

/// A failed task's result.
pub fn error_result(task_id: &str, epoch: u64, err: &ExecutorError) -> TaskResult {
    TaskResult {
        task_id: task_id.to_string(),
        epoch,
        outcome: Some(Outcome::Error(task_error(err))),
    }
}

/// Runs one admitted task in the slot `permit` holds, and always yields a
/// result. The slot is free again when this returns.
pub async fn execute(
    task: TaskAssignment,
    permit: OwnedSemaphorePermit,
    sinks: Arc<Caches>,
) -> TaskResult {
    let started = Instant::now();
    let outcome = match crate::confine::check(&task, sinks.allowed.as_ref()).await {
        Ok(()) => run(&task, sinks, started).await,
        Err(e) => Err(e),
    };
    drop(permit);
    match outcome {
        Ok(out) => {
            tracing::debug!(rows = out.rows, duration_ms = out.duration_ms, "task done");
            TaskResult {
                task_id: task.task_id,
                epoch: task.epoch,
                outcome: Some(Outcome::Ok(out)),
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, retryable = e.is_retryable(), "task failed");
            error_result(&task.task_id, task.epoch, &e)
        }
    }
}

/// Runs an admitted task whose paths are allowed: the one dispatch on
/// what it does.
async fn run(
    task: &TaskAssignment,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let Some(work) = task.work.as_ref() else {
        let m = format!("task {}: missing work", task.task_id);
        return Err(ExecutorError::MalformedTask(m));
    };
    match work {
        Work::Map(_) => map::run(map::plan(task, &caches)?, caches, started).await,
        Work::ShuffleMap(w) => {
            let plan = map::plan(task, &caches)?;
            crate::shuffle::run(plan, w, caches, started).await
        }
        Work::Aggregate(w) => {
            reduce::run::<Aggregate>(task, w.state.as_ref(), w, caches, started).await
        }
        Work::Dedup(w) => reduce::run::<Dedup>(task, w.state.as_ref(), w, caches, started).await,
        Work::Join(w) => reduce::run::<Join>(task, w.state.as_ref(), w, caches, started).await,
        Work::TopN(w) => reduce::run::<TopN>(task, w.state.as_ref(), w, caches, started).await,
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
