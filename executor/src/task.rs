//! Running one task, and the pure decisions around it.
//!
//! ```text
//! TaskAssignment ─admit(epoch)─► stale? ──► TaskResult{error: STALE_EPOCH}
//!        │ execute, in a slot: paths outside --allowed-paths? ──► TaskResult{error: FATAL}
//!        ├─ map, stateless ──► crate::map      (source ─► SQL ─► part files)
//!        ├─ map, stateful ───► crate::shuffle  (source ─► partial aggregates ─► shuffle file)
//!        ├─ reduce ──────────► crate::reduce   (shuffle + state ─► state version, part files)
//!        └─ reduce, dedup ───► crate::dedup    (shuffle + seen keys ─► first rows, part files)
//!                 │
//!   TaskResult{ok: TaskOutput} | TaskResult{error: kind}
//! ```
//!
//! A task is deterministic given its assignment (docs/design-notes.md, invariant 3): a
//! retry, a duplicate or a zombie attempt writes identical bytes or nothing.

use std::sync::Arc;
use std::time::Instant;

use sluice_proto::{
    ErrorKind, Stage, TaskAssignment, TaskError, TaskOutput, TaskResult, task_result::Outcome,
};
use tokio::sync::OwnedSemaphorePermit;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::map;

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

/// Runs an admitted task whose paths are allowed, by its stage.
async fn run(
    task: &TaskAssignment,
    sinks: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    if task.stage == Stage::Reduce as i32 && task.dedup.is_some() {
        crate::dedup::run(task, sinks, started).await
    } else if task.stage == Stage::Reduce as i32 {
        crate::reduce::run(task, sinks, started).await
    } else {
        match map::plan(task, &sinks.storage) {
            Ok(p) if p.shuffle.is_some() => crate::shuffle::run(p, sinks, started).await,
            Ok(p) => map::run(p, sinks, started).await,
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
