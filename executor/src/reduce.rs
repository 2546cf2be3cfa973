//! The reduce stage of a stateful query: one state partition's shuffle
//! buckets merged into its state, the next state version, and the output.
//!
//! ```text
//!  shuffle ranges, in map order ─► partial rows P
//!  state N-1 (held here, or loaded) ─► the state rows of P's keys: O
//!  merge(O ++ P) = M, one state row per key the batch touched
//!  M ─► state/<op>/<p>/<N>.delta (create-only)        state N = state N-1 with M
//!  output: update   ─► final values of M (a DISTINCT: of M's new keys)
//!          complete ─► final values of all of state N
//!        ─► sink part files; state N kept here for batch N+1
//! ```
//!
//! Invariant (determinism): given the same shuffle files and state N-1, a
//! reduce task writes the same delta and the same part files. So does a
//! state rebuilt from storage: it holds the same rows in the same order.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_schema::{DataType, TimeUnit};
use arrow_select::concat::concat_batches;
use sluice_common::spec::{DEFAULT_MAX_FILE_BYTES, OutputMode};
use sluice_common::state::{StateFile, StateStore};
use sluice_proto::{ReduceTask, TaskAssignment, TaskOutput, sink};
use sluice_sql::{Aggregation, WindowEnd};
use tracing::{debug, warn};

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::output::{self, Emitter};
use crate::sink::parts::Layout;
use crate::state::table::{Change, StateTable};
use crate::state::{self, codec};

/// Runs a reduce task.
pub async fn run(
    task: &TaskAssignment,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let malformed = |m: &str| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let reduce = task
        .reduce
        .as_ref()
        .ok_or_else(|| malformed("missing reduce"))?;
    let plan = task
        .plan
        .as_ref()
        .ok_or_else(|| malformed("missing plan"))?;
    let mode =
        OutputMode::parse(&reduce.output_mode).ok_or_else(|| malformed("unknown output mode"))?;
    let Some(sink::Kind::Files(files)) = task.sink.as_ref().and_then(|s| s.kind.as_ref()) else {
        return Err(malformed("missing sink"));
    };
    let input_schema =
        sluice_sql::decode_schema(&plan.input_schema).map_err(|e| malformed(&e.to_string()))?;
    let tables = crate::cache::tables(&caches, &plan.tables).await?;
    let empty = Box::pin(futures::stream::empty());
    let agg = Aggregation::plan(&plan.sql, input_schema, empty, &tables)
        .await?
        .ok_or_else(|| malformed("a reduce task for a query without an aggregation"))?;
    let store = open_store(&caches, &reduce.checkpoint).await?;
    let partials = read_partials(&store, task.batch_id, reduce, &agg).await?;

    let (query, p, version) = (&task.query_id, task.partition, reduce.read_version);
    let held = caches.states.take(query, p, version);
    let reloaded = held.is_none();
    let mut table = match (held, version) {
        (Some(t), _) => t,
        (None, None) => state::empty(agg.partial_schema(), agg.key_columns())?,
        (None, Some(v)) => {
            let empty = state::empty(agg.partial_schema(), agg.key_columns())?;
            state::load(&store, &reduce.operator, p, empty, v).await?
        }
    };
    if reloaded && version.is_some() {
        debug!(rows = table.len(), "state reloaded from storage");
    }
    let snapshot = snapshot(&store, reduce, p, due(reduce, &table));

    let watermark = task.event_time.as_ref().and_then(|e| e.watermark_ms);
    let window = agg.window();
    let work = async {
        let merged = merge(&agg, &table, partials).await?;
        let changed = match mode {
            OutputMode::Update if agg.has_aggregates() => merged.clone(),
            OutputMode::Update => filter(&merged, &table.is_new(&merged)?)?,
            OutputMode::Complete | OutputMode::Append => RecordBatch::new_empty(merged.schema()),
        };
        let none = RecordBatch::new_empty(merged.schema());
        let upserts = Change {
            upserts: merged,
            deletes: none.clone(),
        };
        table.apply(&upserts, task.batch_id)?;
        // Windows the watermark has passed are final: evicted, and in
        // append mode emitted. Complete mode keeps every group.
        let closed = match (window, watermark, mode) {
            (Some(w), Some(wm), OutputMode::Update | OutputMode::Append) => {
                closed(table.rows(), w, wm)?
            }
            _ => none.clone(),
        };
        let evict = Change {
            upserts: none,
            deletes: closed,
        };
        table.apply(&evict, task.batch_id)?;
        // The delta is both steps, applied in the same order on a reload.
        let change = Change {
            upserts: upserts.upserts,
            deletes: evict.deletes,
        };
        let delta = codec::encode(&table.delta_schema(), &[table.to_delta(&change)?])?;
        store
            .write(&reduce.operator, p, StateFile::Delta(task.batch_id), delta)
            .await?;
        let emitted = match mode {
            OutputMode::Update => changed,
            OutputMode::Complete => table.rows().clone(),
            OutputMode::Append => change.deletes,
        };
        let held = caches.states.bytes_besides(query, p) + table.bytes();
        if held as u64 > caches.max_state_bytes() {
            return Err(ExecutorError::StateTooLarge {
                query: task.query_name.clone(),
                bytes: held as u64,
                limit: caches.max_state_bytes(),
            });
        }
        let output = if emitted.num_rows() == 0 {
            Vec::new()
        } else {
            agg.finish(vec![emitted]).await?
        };
        let layout = Layout {
            format: files.format.clone(),
            partition_by: files.partition_by.clone(),
            max_file_bytes: files
                .max_file_bytes
                .unwrap_or(DEFAULT_MAX_FILE_BYTES)
                .max(1),
            batch: task.batch_id,
            partition: p,
        };
        write(&caches, &files.path, layout, agg.output_schema(), output).await
    };
    let (written, ()) = tokio::join!(work, snapshot);
    let (rows, files) = written?;
    let out = TaskOutput {
        rows,
        files,
        duration_ms: started.elapsed().as_millis() as u64,
        state_rows: table.len() as u64,
        state_bytes: table.bytes() as u64,
        ..Default::default()
    };
    caches.states.put(query, p, table);
    Ok(out)
}

pub(crate) async fn open_store(
    caches: &Arc<Caches>,
    location: &str,
) -> Result<StateStore, ExecutorError> {
    let (caches, location) = (caches.clone(), location.to_string());
    tokio::task::spawn_blocking(move || caches.state_store(&location))
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?
}

/// The bucket's partial rows, read from each map task's shuffle file in
/// map order.
async fn read_partials(
    store: &StateStore,
    batch: u64,
    reduce: &ReduceTask,
    agg: &Aggregation,
) -> Result<Vec<RecordBatch>, ExecutorError> {
    let schema = agg.partial_schema();
    let mut rows = Vec::new();
    for r in reduce.inputs.iter().filter(|r| r.length > 0) {
        let bytes = store.read_shuffle(batch, r.map, r.offset, r.length).await?;
        let what = format!(
            "shuffle/{batch}/{:05}.arrow bytes {}+{}",
            r.map, r.offset, r.length
        );
        rows.extend(codec::decode(bytes, &schema, &what)?);
    }
    Ok(rows)
}

/// One state row per key of `partials`: the state's row merged with the
/// batch's partial rows.
async fn merge(
    agg: &Aggregation,
    table: &StateTable,
    partials: Vec<RecordBatch>,
) -> Result<RecordBatch, ExecutorError> {
    let schema = agg.partial_schema();
    if partials.iter().all(|b| b.num_rows() == 0) {
        return Ok(RecordBatch::new_empty(schema));
    }
    let (old, _) = table.lookup(&partials)?;
    let mut input = Vec::with_capacity(partials.len() + 1);
    input.push(old);
    input.extend(partials);
    let merged = agg.merge(input).await?;
    concat_batches(&schema, &merged).map_err(|e| ExecutorError::TaskPanicked(e.to_string()))
}

/// The state held, when its version is due a snapshot (every
/// `snapshot_interval` batches): its version and rows.
fn due(reduce: &ReduceTask, table: &StateTable) -> Option<(u64, RecordBatch)> {
    let v = table.version?;
    ((v + 1) % reduce.snapshot_interval.max(1) == 0).then(|| (v, table.rows().clone()))
}

/// Writes a snapshot. The batch that made the state has committed, since a
/// later batch is running; a failure costs a later reload more deltas,
/// never a wrong answer.
async fn snapshot(
    store: &StateStore,
    reduce: &ReduceTask,
    p: u32,
    due: Option<(u64, RecordBatch)>,
) {
    let Some((v, rows)) = due else { return };
    let written = async {
        let bytes = codec::encode(&rows.schema(), &[rows])?;
        store
            .write(&reduce.operator, p, StateFile::Snapshot(v), bytes)
            .await?;
        Ok::<_, ExecutorError>(())
    };
    if let Err(e) = written.await {
        warn!(version = v, partition = p, error = %e, "state snapshot not written");
    }
}

fn filter(
    rows: &RecordBatch,
    keep: &arrow_array::BooleanArray,
) -> Result<RecordBatch, ExecutorError> {
    arrow_select::filter::filter_record_batch(rows, keep)
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))
}

/// The state rows whose window ends at or before the watermark: final.
fn closed(
    rows: &RecordBatch,
    (column, end): (usize, WindowEnd),
    watermark: i64,
) -> Result<RecordBatch, ExecutorError> {
    let fail =
        |e: arrow_schema::ArrowError| ExecutorError::TaskPanicked(format!("window end: {e}"));
    let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
    let key = rows.column(column);
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
    let keep: arrow_array::BooleanArray = ends
        .iter()
        .map(|e| Some(e.is_some_and(|e| e.saturating_add(plus) <= watermark)))
        .collect();
    filter(rows, &keep)
}

/// Writes the output rows as part files; returns the rows and files.
async fn write(
    caches: &Arc<Caches>,
    path: &str,
    layout: Layout,
    schema: arrow_schema::SchemaRef,
    output: Vec<RecordBatch>,
) -> Result<(u64, Vec<sluice_proto::SinkFile>), ExecutorError> {
    if output.iter().all(|b| b.num_rows() == 0) {
        return Ok((0, Vec::new()));
    }
    let sink = output::open_sink(caches, path).await?;
    let (tx, rx) = output::channel();
    let emitter = tokio::task::spawn_blocking(move || {
        let mut emitter = Emitter::new(layout, &schema, tx)?;
        for b in &output {
            if !emitter.write(b)? {
                break;
            }
        }
        emitter.finish()
    });
    let files = output::write_files(&sink, rx).await?;
    let rows = emitter
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    Ok((rows, files))
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
