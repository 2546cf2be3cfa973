//! Running one task, and the pure decisions around it.
//!
//! ```text
//! TaskAssignment ─admit(epoch)─► stale? ──► TaskResult{error: STALE_EPOCH}
//!        │ run
//!        ▼
//!   plan() (validate, in a slot) ──────► spawn_blocking(generate + encode)
//!        │                                        │ rows == 0: no file
//!        ▼                                        ▼
//!   TaskResult{error: kind}  ◄── error ──  FileSink::write_part (create-only)
//!                                                 │
//!                              TaskResult{ok: rows, files, duration_ms}
//! ```
//!
//! A task is deterministic given its assignment (DESIGN.md, invariant 3): a
//! retry, a duplicate or a zombie attempt writes identical bytes or nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_common::sink::FileSink;
use sluice_proto::{
    ErrorKind, RateTask, SinkFile, TaskAssignment, TaskError, TaskOutput, TaskResult, sink,
    task_result::Outcome, task_source,
};
use tokio::sync::OwnedSemaphorePermit;

use crate::error::ExecutorError;

/// Whether a task may run, given the highest driver epoch seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Run it; the task's epoch becomes the highest seen if it is higher.
    Run,
    /// Refuse it: a newer driver has already spoken to this executor.
    Stale { max_seen: u64 },
}

/// Refuses work from an epoch lower than the highest one seen (DESIGN.md,
/// Cluster: a deposed driver cannot make executors write).
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
        ExecutorError::MalformedTask(_) | ExecutorError::Config(_) => ErrorKind::Fatal,
        _ => ErrorKind::Retryable,
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

/// What one rate task does, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatePlan {
    pub batch_id: u64,
    pub partition: u32,
    pub rate: RateTask,
    /// The file sink's root location.
    pub sink_path: String,
}

/// Validates an assignment into a plan; anything missing is fatal.
pub fn plan(task: &TaskAssignment) -> Result<RatePlan, ExecutorError> {
    let bad = |m: &str| {
        Err(ExecutorError::MalformedTask(format!(
            "task {}: {m}",
            task.task_id
        )))
    };
    let Some(task_source::Kind::Rate(rate)) = task.source.as_ref().and_then(|s| s.kind.as_ref())
    else {
        return bad("missing source");
    };
    let Some(sink::Kind::Files(files)) = task.sink.as_ref().and_then(|s| s.kind.as_ref()) else {
        return bad("missing sink");
    };
    if rate.partitions == 0 || task.partition >= rate.partitions {
        return bad("partition out of range");
    }
    if rate.end_value < rate.start_value {
        return bad("end_value is below start_value");
    }
    if files.path.is_empty() {
        return bad("missing sink path");
    }
    if !(files.format.is_empty() || files.format == "jsonl") {
        return bad("sink format must be jsonl");
    }
    Ok(RatePlan {
        batch_id: task.batch_id,
        partition: task.partition,
        rate: *rate,
        sink_path: files.path.clone(),
    })
}

/// Opened file sinks, one per sink location, shared by all tasks.
#[derive(Debug, Default)]
pub struct SinkCache {
    sinks: Mutex<HashMap<String, FileSink>>,
}

impl SinkCache {
    /// The sink at `path`, opened on first use. Blocking (it may create the
    /// directory): call it from a blocking thread. Failures are not cached.
    pub fn get(&self, path: &str) -> Result<FileSink, ExecutorError> {
        if let Some(s) = self.lock().get(path) {
            return Ok(s.clone());
        }
        let sink = FileSink::open(path)?;
        self.lock().insert(path.to_string(), sink.clone());
        Ok(sink)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, FileSink>> {
        // A poisoned lock is a bug: panic.
        self.sinks.lock().expect("sink cache lock poisoned")
    }
}

/// Runs one admitted task in the slot `permit` holds, and always yields a
/// result. The slot is free again when this returns.
pub async fn execute(
    task: TaskAssignment,
    permit: OwnedSemaphorePermit,
    sinks: Arc<SinkCache>,
) -> TaskResult {
    let started = Instant::now();
    let outcome = match plan(&task) {
        Ok(p) => run_rate(p, sinks, started).await,
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

/// Chunks of encoded rows in flight between the generator and the writer.
const CHUNKS_IN_FLIGHT: usize = 2;

/// Writes one rate task's part file in bounded memory:
///
/// ```text
///  blocking thread: generate CHUNK_ROWS rows ─► encode jsonl ─► channel (2)
///  this task:       channel ─► part file writer (multipart, 2 parts of 4 MiB)
/// ```
///
/// So a running task holds at most a few chunks of 64 Ki rows (a few MiB)
/// plus the writer's parts, whatever its size. Dropping this future (a
/// cancelled task) stops the generator and removes the unfinished file.
pub async fn run_rate(
    plan: RatePlan,
    sinks: Arc<SinkCache>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let RatePlan {
        batch_id,
        partition,
        rate,
        sink_path,
    } = plan;
    let (_, expected) = sluice_common::rate::partition_range(
        partition,
        rate.partitions,
        rate.start_value,
        rate.end_value,
    );
    if expected == 0 {
        return Ok(TaskOutput {
            rows: 0,
            files: Vec::new(),
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }
    let sink = tokio::task::spawn_blocking(move || sinks.get(&sink_path))
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    let mut writer = sink.begin_part(batch_id, partition).await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(CHUNKS_IN_FLIGHT);
    let generator = tokio::task::spawn_blocking(move || -> Result<u64, ExecutorError> {
        let mut rows = 0u64;
        for chunk in sluice_common::rate::chunks(
            partition,
            rate.partitions,
            rate.rows_per_second,
            rate.start_ms,
            rate.start_value,
            rate.end_value,
        ) {
            let chunk = chunk?;
            rows += chunk.num_rows() as u64;
            let data = sluice_common::sink::encode_jsonl(&[chunk])?;
            if tx.blocking_send(bytes::Bytes::from(data)).is_err() {
                break; // the writer is gone: the task failed or was cancelled
            }
        }
        Ok(rows)
    });
    while let Some(chunk) = rx.recv().await {
        writer.write(chunk).await?;
    }
    let rows = generator
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    if rows != expected {
        return Err(ExecutorError::TaskPanicked(format!(
            "generated {rows} rows of the {expected} planned"
        )));
    }
    let f = sink.finish_part(writer, batch_id, partition, rows).await?;
    Ok(TaskOutput {
        rows,
        files: vec![SinkFile {
            path: f.path,
            rows: f.rows,
            bytes: f.bytes,
        }],
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
