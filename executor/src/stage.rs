//! What the reduce stage's operators share: the shuffle rows of a state
//! partition, the rows the watermark has passed, and writing the output.
//! The partition's state itself is `crate::partition`'s.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use sluice_common::spec::OutputMode;
use sluice_common::state::StateStore;
use sluice_proto::{StateWork, TaskAssignment};
use sluice_sql::WindowEnd;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::output::{self, Emitter};
use crate::sink::TaskOut;
use crate::state::codec;
use crate::state::table::StateTable;

/// Rows shuffled to an operator, with the side of it they are for.
#[derive(Debug, Clone)]
pub struct Shuffled {
    pub side: u32,
    pub rows: RecordBatch,
}

/// A reduce task's assignment, validated: its query, its sink, and the
/// query's stream tables and static tables.
pub struct Assigned<'a> {
    pub plan: &'a sluice_proto::TaskPlan,
    pub files: &'a sluice_proto::TaskSink,
    /// The stream tables, none of which a reduce task reads.
    pub streams: sluice_sql::Streams,
    pub tables: Vec<sluice_sql::Table>,
}

/// Validates a reduce task; anything missing is fatal.
pub async fn assigned<'a>(
    task: &'a TaskAssignment,
    caches: &Caches,
) -> Result<Assigned<'a>, ExecutorError> {
    let malformed = |m: &str| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let plan = task
        .plan
        .as_ref()
        .ok_or_else(|| malformed("missing plan"))?;
    let files = task
        .sink
        .as_ref()
        .ok_or_else(|| malformed("missing sink"))?;
    let streams = streams(plan, None).map_err(|e| malformed(&e))?;
    let tables = crate::cache::tables(caches, &plan.tables).await?;
    Ok(Assigned {
        plan,
        files,
        streams,
        tables,
    })
}

/// The stream tables of a task's query, decoded, reading `reading` (a map
/// task's table; the first table for a reduce task, which reads none).
pub fn streams(
    plan: &sluice_proto::TaskPlan,
    reading: Option<&str>,
) -> Result<sluice_sql::Streams, String> {
    let mut tables = Vec::with_capacity(plan.streams.len());
    for s in &plan.streams {
        let schema = sluice_sql::decode_schema(&s.schema)
            .map_err(|e| format!("the schema of stream {:?}: {e}", s.name))?;
        tables.push((s.name.clone(), schema));
    }
    let reading = match (reading, tables.first()) {
        (Some(r), _) if tables.iter().any(|(n, _)| n == r) => r.to_string(),
        (Some(r), _) => return Err(format!("the plan has no stream {r:?}")),
        (None, Some((first, _))) => first.clone(),
        (None, None) => return Err("the plan has no stream".into()),
    };
    Ok(sluice_sql::Streams { tables, reading })
}

/// The state store at `location`, opened on first use.
pub async fn open_store(caches: &Arc<Caches>, location: &str) -> Result<StateStore, ExecutorError> {
    let (caches, location) = (caches.clone(), location.to_string());
    tokio::task::spawn_blocking(move || caches.state_store(&location))
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?
}

/// The bucket's rows, read from each shuffle file that has rows for it,
/// in the order the driver lists them (map tasks in map order, then the
/// operators that feed this one), each decoded with the schema of the
/// side it is for (`schema_of`).
pub async fn read_partials(
    store: &StateStore,
    batch: u64,
    work: &StateWork,
    schema_of: impl Fn(u32) -> Result<SchemaRef, ExecutorError>,
) -> Result<Vec<Shuffled>, ExecutorError> {
    let mut rows = Vec::new();
    for r in work.inputs.iter().filter(|r| r.length > 0) {
        let schema = schema_of(r.side)?;
        let bytes = store
            .read_shuffle(batch, (r.stage, r.map), r.offset, r.length)
            .await?;
        let what = format!(
            "shuffle/{batch}/{}-{:05}.arrow bytes {}+{}",
            r.stage, r.map, r.offset, r.length
        );
        let decoded = codec::decode(bytes, &schema, &what)?;
        rows.extend(decoded.into_iter().map(|b| Shuffled {
            side: r.side,
            rows: b,
        }));
    }
    Ok(rows)
}

pub fn filter(
    rows: &RecordBatch,
    keep: &arrow_array::BooleanArray,
) -> Result<RecordBatch, ExecutorError> {
    arrow_select::filter::filter_record_batch(rows, keep)
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))
}

/// The output mode a reduce task's work names; an unknown one is fatal.
pub fn output_mode(task: &TaskAssignment, mode: i32) -> Result<OutputMode, ExecutorError> {
    OutputMode::from_proto(mode).ok_or_else(|| {
        ExecutorError::MalformedTask(format!("task {}: unknown output mode", task.task_id))
    })
}

/// The state rows a grouping operator evicts in `mode`: in update and
/// append modes, the groups whose window (`window`) the watermark has
/// closed; complete mode keeps every group.
pub fn evict_closed(
    state: &StateTable,
    window: Option<(usize, WindowEnd)>,
    watermark: Option<i64>,
    mode: OutputMode,
) -> Result<Option<RecordBatch>, ExecutorError> {
    match (window, watermark, mode) {
        // A window that is a key column is read from the keys alone:
        // only the closed windows' rows are decoded whole.
        (Some((column, end)), Some(wm), OutputMode::Update | OutputMode::Append)
            if column < state.keys() =>
        {
            let rows = state.scan_keys_where(|keys| ended(&keys[column], end, wm))?;
            Ok(Some(rows))
        }
        (Some(w), Some(wm), OutputMode::Update | OutputMode::Append) => {
            closed(&state.scan()?, w, wm).map(Some)
        }
        _ => Ok(None),
    }
}

/// The state rows a grouping operator emits in `mode`: the groups the
/// batch changed (`pending`, update), every group (complete), or the
/// groups the watermark closed (append).
pub fn emitted(
    mode: OutputMode,
    pending: Option<RecordBatch>,
    evicted: RecordBatch,
    state: &StateTable,
) -> Result<RecordBatch, ExecutorError> {
    Ok(match mode {
        OutputMode::Update => pending.unwrap_or_else(|| RecordBatch::new_empty(evicted.schema())),
        OutputMode::Complete => state.scan()?,
        OutputMode::Append => evicted,
    })
}

/// The state rows whose window ends at or before the watermark: final.
pub fn closed(
    rows: &RecordBatch,
    (column, end): (usize, WindowEnd),
    watermark: i64,
) -> Result<RecordBatch, ExecutorError> {
    filter(rows, &ended(rows.column(column), end, watermark)?)
}

/// Whether each window of `key` (a window's key column) ends at or before
/// the watermark.
fn ended(key: &ArrayRef, end: WindowEnd, watermark: i64) -> Result<BooleanArray, ExecutorError> {
    let fail =
        |e: arrow_schema::ArrowError| ExecutorError::TaskPanicked(format!("window end: {e}"));
    let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
    let (ends, plus) = match end {
        WindowEnd::Field => {
            let s = key.as_struct_opt().ok_or_else(|| {
                ExecutorError::TaskPanicked("a window key that is not a struct".into())
            })?;
            (arrow_cast::cast(s.column(1), &ms).map_err(fail)?, 0)
        }
        WindowEnd::Plus(d) => (arrow_cast::cast(key, &ms).map_err(fail)?, d),
    };
    let ends = ends.as_primitive::<TimestampMillisecondType>();
    Ok(ends
        .iter()
        .map(|e| Some(e.is_some_and(|e| e.saturating_add(plus) <= watermark)))
        .collect())
}

/// Writes reduce task `task`'s output rows into its sink; returns what
/// was written and the sink's report.
pub async fn write(
    caches: &Arc<Caches>,
    sink: &sluice_proto::TaskSink,
    task: &TaskAssignment,
    schema: arrow_schema::SchemaRef,
    output: Vec<RecordBatch>,
) -> Result<(output::Emitted, output::Delivered), ExecutorError> {
    if output.iter().all(|b| b.num_rows() == 0) {
        return Ok((output::Emitted::default(), Default::default()));
    }
    let malformed = |m| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let sink = crate::sink::writer(sink).map_err(malformed)?;
    let max_bytes = output::task_cap(task.plan.as_ref().map_or(0, |p| p.max_output_bytes));
    let out = TaskOut {
        batch: task.batch_id,
        partition: task.partition,
    };
    let (tx, rx) = output::channel();
    let writer = sink.clone();
    let emitter = tokio::task::spawn_blocking(move || {
        let mut emitter = Emitter::new(&*writer, out, max_bytes, &schema, tx)?;
        for b in &output {
            if !emitter.write(b)? {
                break;
            }
        }
        emitter.finish()
    });
    let written = sink.write(caches, task.partition, rx).await;
    let emitted = emitter
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?;
    let (delivered, rows) = output::settle(written, emitted)?;
    Ok((rows, delivered))
}
