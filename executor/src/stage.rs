//! What the reduce stage's operators share: the shuffle rows of a state
//! partition, its state (held, or rebuilt from storage), snapshots, the
//! rows the watermark has passed, the keys that expired (`state_ttl_ms`),
//! and writing the output.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use sluice_common::spec::OutputMode;
use sluice_common::state::{StateFile, StateStore};
use sluice_proto::{StateWork, TaskAssignment};
use sluice_sql::WindowEnd;
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::output::{self, Emitter};
use crate::sink::parts::Layout;
use crate::state::codec;
use crate::state::rescale::{self, Place, Repartition};
use crate::state::table::{Change, FrozenState, StateTable};

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

/// The state of the task's partition at the version it reads: the one
/// this executor holds (affinity), or one rebuilt from storage. It is
/// stamped when the work's keys expire (`work.ttl`).
pub async fn state(
    caches: &Caches,
    store: &StateStore,
    task: &TaskAssignment,
    work: &StateWork,
    (schema, keys): (SchemaRef, usize),
    router: &dyn Repartition,
) -> Result<StateTable, ExecutorError> {
    let (owner, p, version) = (owner(task, work), task.partition, work.read_version);
    let stamped = work.ttl.is_some();
    if let Some(held) = caches.states.take(&owner, p, version) {
        // Invariant: a query's operator is stamped or not for its life
        // (its spec's state_ttl_ms never changes); a held state of the
        // other kind is not this operator's, and is rebuilt.
        if held.is_stamped() == stamped {
            return Ok(held);
        }
        warn!(
            partition = p,
            stamped, "a held state of another kind dropped; rebuilding it"
        );
    }
    let Some(v) = version else {
        return caches.states.table(schema, keys, stamped);
    };
    let started = std::time::Instant::now();
    let place = Place {
        store,
        operator: &work.operator,
        rescales: &work.rescales,
        schema,
        keys,
        stamped,
    };
    let table = rescale::load(&caches.states, &place, p, v, router).await?;
    info!(
        partition = p,
        version = v,
        rows = table.len(),
        ms = started.elapsed().as_millis() as u64,
        "state reloaded from storage"
    );
    Ok(table)
}

/// What left a partition's state in a batch beside the operator's own
/// deletes.
#[derive(Debug)]
pub struct Left {
    /// The rows the watermark passed, which the operator emits from.
    pub evicted: RecordBatch,
    /// How many keys expired (idle for the spec's `state_ttl_ms`); they
    /// emit nothing.
    pub expired: u64,
}

/// Moves a partition's state to the batch's version: first the
/// operator's `change` (its upserts, then its deletes, keys that none of
/// the upserts has), then the deletes that `evict` picks from the state
/// that results (the rows the watermark has passed), then, when the
/// work's keys expire, the keys idle for its ttl. The delta file records
/// the upserts and all three deletes, and a reload applies them in the
/// same order (the deletes name distinct keys, none of them upserted but
/// the evicted ones, so one set of deletes after the upserts leaves the
/// same state).
///
/// Invariant: a stamped state's upserts carry the batch's `now_ms`, so a
/// key this batch upserted never expires in it.
pub async fn advance(
    table: &mut StateTable,
    store: &StateStore,
    task: &TaskAssignment,
    work: &StateWork,
    change: Change,
    evict: impl FnOnce(&StateTable) -> Result<Option<RecordBatch>, ExecutorError>,
) -> Result<Left, ExecutorError> {
    if let Some(ttl) = &work.ttl {
        table.set_now(ttl.now_ms);
    }
    table.apply(&change, task.batch_id)?;
    let none = RecordBatch::new_empty(change.upserts.schema());
    let evicted = evict(table)?.unwrap_or_else(|| none.clone());
    let evicting = Change {
        upserts: none.clone(),
        deletes: evicted.clone(),
    };
    table.apply(&evicting, task.batch_id)?;
    let expired = match &work.ttl {
        Some(ttl) => table.expired(ttl.ttl_ms, ttl.now_ms)?,
        None => none.clone(),
    };
    if expired.num_rows() > 0 {
        let expiring = Change {
            upserts: none,
            deletes: expired.clone(),
        };
        table.apply(&expiring, task.batch_id)?;
        debug!(
            partition = task.partition,
            expired = expired.num_rows(),
            ttl_ms = work.ttl.as_ref().map_or(0, |t| t.ttl_ms),
            now_ms = work.ttl.as_ref().map_or(0, |t| t.now_ms),
            "idle state keys expired"
        );
    }
    let deletes = arrow_select::concat::concat_batches(
        &evicted.schema(),
        [&change.deletes, &evicted, &expired],
    )
    .map_err(|e| ExecutorError::TaskPanicked(format!("state deletes: {e}")))?;
    let recorded = Change {
        upserts: change.upserts,
        deletes,
    };
    let delta = codec::encode(&table.delta_schema(), &[table.to_delta(&recorded)?])?;
    let file = StateFile::Delta(task.batch_id);
    store
        .write(&work.operator, task.partition, file, delta)
        .await?;
    Ok(Left {
        evicted,
        expired: expired.num_rows() as u64,
    })
}

/// A reduce task's result, once its output is written: the partition's
/// new state version is kept here for the next batch (affinity).
pub fn done(
    caches: &Caches,
    task: &TaskAssignment,
    table: StateTable,
    (emitted, delivered): (output::Emitted, output::Delivered),
    started: std::time::Instant,
) -> sluice_proto::TaskOutput {
    let out = sluice_proto::TaskOutput {
        rows: emitted.rows,
        discarded_bytes: emitted.discarded_bytes,
        files: delivered.files,
        kafka: delivered.kafka,
        duration_ms: started.elapsed().as_millis() as u64,
        state_rows: table.len() as u64,
        state_bytes: table.bytes() as u64,
        ..Default::default()
    };
    if let Some(work) = task.state() {
        caches.states.put(&owner(task, work), task.partition, table);
    }
    out
}

/// Whose state a reduce task works on, as the executor holds it: its
/// query's operator.
/// Whose state a partition's is: a query's operator in one state
/// generation (partition P of another generation holds other keys).
fn owner(task: &TaskAssignment, work: &StateWork) -> String {
    format!("{}/{}/g{}", task.query_id, work.operator, work.generation)
}

/// Keeps the states this executor holds under `--max-state-bytes`: the
/// task's own partition first, dropping the other partitions' states to
/// make room. Only a partition whose state alone passes the bound fails,
/// with an error naming its query, rather than an executor killed for
/// memory: one query's state never fails another.
pub fn bound(
    caches: &Caches,
    task: &TaskAssignment,
    table: &StateTable,
) -> Result<(), ExecutorError> {
    let limit = caches.max_state_bytes();
    let own = table.bytes() as u64;
    if own > limit {
        return Err(ExecutorError::StateTooLarge {
            query: task.query_name.clone(),
            bytes: own,
            limit,
        });
    }
    let room = usize::try_from(limit - own).unwrap_or(usize::MAX);
    let owner = task
        .state()
        .map_or_else(|| task.query_id.clone(), |w| owner(task, w));
    let dropped = caches.states.make_room(&owner, task.partition, room);
    if dropped > 0 {
        tracing::info!(dropped, "state partitions dropped from memory to make room");
    }
    Ok(())
}

/// Where a reduce task's output goes: its state partition's part files.
pub fn layout(files: &sluice_proto::TaskSink, task: &TaskAssignment) -> Layout {
    Layout {
        format: files.format(),
        partition_by: files.partition_by.clone(),
        max_file_bytes: files.max_file_bytes.max(1),
        max_task_bytes: output::task_cap(task.plan.as_ref().map_or(0, |p| p.max_output_bytes)),
        batch: task.batch_id,
        partition: task.partition,
        discard: files.discard,
        kafka: files.kafka.clone(),
    }
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

/// The state held, when its version is due a snapshot (every
/// `snapshot_interval` batches): its version, frozen.
pub fn due(
    work: &StateWork,
    table: &StateTable,
) -> Result<Option<(u64, FrozenState)>, ExecutorError> {
    let Some(v) = table.version else {
        return Ok(None);
    };
    if (v + 1) % work.snapshot_interval.max(1) != 0 {
        return Ok(None);
    }
    Ok(Some((v, table.freeze()?)))
}

/// Writes a snapshot in the background, off the batch's path: a task the
/// executor owns (see [`Caches::background`]), which a shutdown waits for
/// briefly. The batch that made the state has committed, since a later
/// batch is running; a snapshot that is never written costs a later reload
/// more deltas, never a wrong answer.
pub fn snapshot(
    caches: &Caches,
    store: &StateStore,
    work: &StateWork,
    p: u32,
    due: Option<(u64, FrozenState)>,
) {
    let Some((v, frozen)) = due else { return };
    let (store, operator) = (store.clone(), work.operator.clone());
    let turns = caches.snapshots.clone();
    let span = tracing::info_span!("snapshot", partition = p, version = v);
    let write = async move {
        let written = async {
            let _turn = turns
                .acquire()
                .await
                .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?;
            let encode = move || codec::encode_each(frozen.schema(), frozen.batches());
            let bytes = tokio::task::spawn_blocking(encode)
                .await
                .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
            store
                .write(&operator, p, StateFile::Snapshot(v), bytes)
                .await?;
            Ok::<_, ExecutorError>(())
        };
        if let Err(e) = written.await {
            warn!(error = %e, "state snapshot not written");
        }
    };
    caches
        .background
        .spawn(tracing::Instrument::instrument(write, span));
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

/// Writes the output rows as part files (counts them, for the discard
/// sink); returns what was written and the files.
pub async fn write(
    caches: &Arc<Caches>,
    sink: &sluice_proto::TaskSink,
    layout: Layout,
    schema: arrow_schema::SchemaRef,
    output: Vec<RecordBatch>,
) -> Result<(output::Emitted, output::Delivered), ExecutorError> {
    if output.iter().all(|b| b.num_rows() == 0) {
        return Ok((output::Emitted::default(), Default::default()));
    }
    let sink = output::open_sink(caches, sink, layout.partition).await?;
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
    let written = output::write(&sink, rx).await;
    let emitted = emitter
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?;
    let (delivered, rows) = output::settle(written, emitted)?;
    Ok((rows, delivered))
}
