//! Running one task, and the pure decisions around it.
//!
//! ```text
//! TaskAssignment ─admit(epoch)─► stale? ──► TaskResult{error: STALE_EPOCH}
//!        │ run
//!        ▼
//!   plan() (validate, in a slot) ──────► spawn_blocking(read + SQL + encode)
//!        │                                        │ rows == 0: no file
//!        ▼                                        ▼
//!   TaskResult{error: kind}  ◄── error ──  part files (create-only)
//!                                                 │
//!                              TaskResult{ok: rows, files, duration_ms}
//! ```
//!
//! A task is deterministic given its assignment (DESIGN.md, invariant 3): a
//! retry, a duplicate or a zombie attempt writes identical bytes or nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_schema::SchemaRef;
use sluice_common::spec::DEFAULT_MAX_FILE_BYTES;
use sluice_common::storage::VisibleWriter;
use sluice_proto::{
    ErrorKind, SinkFile, Stage, TaskAssignment, TaskError, TaskOutput, TaskResult, sink,
    task_result::Outcome,
};
use tokio::sync::OwnedSemaphorePermit;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::input::Input;
use crate::sink::parts::{Layout, Parts, Piece};
use crate::source::{self, SourceReader};

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
        ExecutorError::MalformedTask(_) | ExecutorError::Config(_) | ExecutorError::BadInput(_) => {
            ErrorKind::Fatal
        }
        ExecutorError::Sql(e) if !e.is_retryable() => ErrorKind::Fatal,
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

/// What one task does, validated.
pub struct TaskPlan {
    pub batch_id: u64,
    pub partition: u32,
    pub source: Box<dyn SourceReader>,
    /// The query, and the schema of its `input` table.
    pub sql: String,
    pub input_schema: SchemaRef,
    /// The file sink's root location, and the layout of its files.
    pub sink_path: String,
    pub layout: Layout,
    /// The static tables the SQL joins with, as this batch reads them.
    pub tables: Vec<sluice_proto::TablePlan>,
}

/// Validates an assignment into a plan; anything missing is fatal.
pub fn plan(task: &TaskAssignment) -> Result<TaskPlan, ExecutorError> {
    let malformed = |m: String| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    if task.stage != Stage::Map as i32 {
        return Err(malformed(format!("stage {} is not supported", task.stage)));
    }
    let query = task
        .plan
        .as_ref()
        .ok_or_else(|| malformed("missing plan".into()))?;
    let input_schema =
        sluice_sql::decode_schema(&query.input_schema).map_err(|e| malformed(e.to_string()))?;
    let source = task
        .source
        .as_ref()
        .ok_or_else(|| malformed("missing source".into()))?;
    let source = source::open(source, task.partition, input_schema.clone())
        .map_err(|e| malformed(e.to_string()))?;
    if input_schema != source.schema() {
        return Err(malformed(
            "the plan's input schema is not the source's".into(),
        ));
    }
    let Some(sink::Kind::Files(files)) = task.sink.as_ref().and_then(|s| s.kind.as_ref()) else {
        return Err(malformed("missing sink".into()));
    };
    if files.path.is_empty() {
        return Err(malformed("missing sink path".into()));
    }
    crate::sink::encoder(&files.format, source.schema()).map_err(|e| malformed(e.to_string()))?;
    let layout = Layout {
        format: files.format.clone(),
        partition_by: files.partition_by.clone(),
        max_file_bytes: files
            .max_file_bytes
            .unwrap_or(DEFAULT_MAX_FILE_BYTES)
            .max(1),
        batch: task.batch_id,
        partition: task.partition,
    };
    Ok(TaskPlan {
        batch_id: task.batch_id,
        partition: task.partition,
        source,
        sql: query.sql.clone(),
        input_schema,
        sink_path: files.path.clone(),
        layout,
        tables: query.tables.clone(),
    })
}

/// Runs one admitted task in the slot `permit` holds, and always yields a
/// result. The slot is free again when this returns.
pub async fn execute(
    task: TaskAssignment,
    permit: OwnedSemaphorePermit,
    sinks: Arc<Caches>,
) -> TaskResult {
    let started = Instant::now();
    let outcome = match plan(&task) {
        Ok(p) => run(p, sinks, started).await,
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

/// Pieces of encoded rows in flight between the producer and the writer.
const CHUNKS_IN_FLIGHT: usize = 2;

/// Runs one task and writes its part files in bounded memory:
///
/// ```text
///  blocking thread: source chunk ─► SQL (DataFusion) ─► Parts (encode) ─► channel (2)
///  this task:       channel ─► part file writers (multipart, 2 parts of 4 MiB each)
/// ```
///
/// So a running task holds a few chunks plus each open file's writer,
/// whatever its size. Dropping this future (a cancelled task) stops the
/// producer and removes the unfinished files. A task whose output is
/// empty writes no file.
pub async fn run(
    plan: TaskPlan,
    sinks: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let planned = plan.source.planned_rows();
    let done = |p: Produced, files| TaskOutput {
        rows: p.rows,
        files,
        duration_ms: started.elapsed().as_millis() as u64,
        input_rows: p.input_rows,
        bad_records: p.bad_records,
    };
    if planned == Some(0) {
        let none = Produced {
            input_rows: 0,
            rows: 0,
            bad_records: 0,
        };
        return Ok(done(none, Vec::new()));
    }
    let sink_path = plan.sink_path.clone();
    let caches = sinks.clone();
    let sink = tokio::task::spawn_blocking(move || caches.sink(&sink_path))
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Piece>(CHUNKS_IN_FLIGHT);
    let runtime = tokio::runtime::Handle::current();
    let producer = tokio::task::spawn_blocking(move || produce(plan, &runtime, &tx, &sinks));
    // A file is begun with its first bytes: a task whose query keeps no
    // row writes nothing at all.
    let mut writers: HashMap<Arc<str>, VisibleWriter> = HashMap::new();
    let mut files = Vec::new();
    while let Some(piece) = rx.recv().await {
        match piece {
            Piece::Data { name, bytes } => {
                if !writers.contains_key(&name) {
                    let w = sink.begin_part(&name).await?;
                    writers.insert(name.clone(), w);
                }
                writers
                    .get_mut(&name)
                    .expect("begun above")
                    .write(bytes)
                    .await?;
            }
            Piece::End { name, rows } => {
                let w = writers.remove(&name).ok_or_else(|| {
                    ExecutorError::TaskPanicked(format!("{name} ended before any bytes"))
                })?;
                let f = sink.finish_part(w, &name, rows).await?;
                files.push(SinkFile {
                    path: f.path,
                    rows: f.rows,
                    bytes: f.bytes,
                });
            }
        }
    }
    let produced = producer
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    if let Some(planned) = planned.filter(|&p| p != produced.input_rows) {
        return Err(ExecutorError::TaskPanicked(format!(
            "read {} rows of the {planned} planned",
            produced.input_rows
        )));
    }
    if let Some(name) = writers.keys().next() {
        return Err(ExecutorError::TaskPanicked(format!(
            "{name} was never finished"
        )));
    }
    Ok(done(produced, files))
}

/// What the blocking half of a task counted.
struct Produced {
    input_rows: u64,
    rows: u64,
    bad_records: u64,
}

/// The blocking half of [`run`]: reads the input through the query and
/// sends the encoded output.
fn produce(
    plan: TaskPlan,
    runtime: &tokio::runtime::Handle,
    tx: &tokio::sync::mpsc::Sender<Piece>,
    caches: &Caches,
) -> Result<Produced, ExecutorError> {
    let tables = runtime.block_on(crate::cache::tables(caches, &plan.tables))?;
    let bad_records = crate::counter::Counter::default();
    let input = Input::new(plan.source.read(bad_records.clone()));
    let (read, failure) = (input.read.clone(), input.failure.clone());
    let mut output = runtime.block_on(sluice_sql::run(
        &plan.sql,
        plan.input_schema,
        Box::pin(input),
        &tables,
    ))?;
    let mut parts = Parts::new(plan.layout, &output.schema())?;
    let mut rows = 0u64;
    let mut pieces = Vec::new();
    let send = |pieces: &mut Vec<Piece>| {
        // A closed channel: the writer is gone (failed or cancelled).
        pieces.drain(..).all(|p| tx.blocking_send(p).is_ok())
    };
    while let Some(batch) = runtime.block_on(output.next()) {
        let batch = match batch {
            Ok(b) => b,
            // The input's own error says whether a retry may help.
            Err(e) => return Err(failure.take().unwrap_or(e.into())),
        };
        rows += batch.num_rows() as u64;
        parts.write(&batch, &mut pieces)?;
        if !send(&mut pieces) {
            break;
        }
    }
    parts.finish(&mut pieces)?;
    send(&mut pieces);
    Ok(Produced {
        input_rows: read.get(),
        rows,
        bad_records: bad_records.get(),
    })
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
