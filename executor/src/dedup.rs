//! The reduce stage of a deduplicating query (`dedup: {columns,
//! within_ms}`): of the rows with one key, the first is emitted, and the
//! key is remembered until the watermark passes its event time plus
//! `within_ms`.
//!
//! ```text
//!  shuffle rows, in map order ─► key seen (in the state, or earlier in this batch)? drop
//!                             └► else emit the row; state += (key, event time + within_ms)
//!  state rows whose expiry the watermark has passed ─► evicted
//!  delta N = (new keys, evicted keys) ─► state/<op>/<p>/<N>.delta
//! ```
//!
//! A state row is the key columns, then `__sluice_expires`. A row whose
//! event time is null never expires.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow_select::concat::concat_batches;
use sluice_proto::{TaskAssignment, TaskOutput};
use sluice_sql::WindowEnd;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::stage;

/// The column of a dedup state row that holds its expiry.
const EXPIRES: &str = "__sluice_expires";

/// The indices of `columns` in `schema`.
pub fn key_columns(schema: &SchemaRef, columns: &[String]) -> Result<Vec<usize>, ExecutorError> {
    columns
        .iter()
        .map(|c| {
            schema.index_of(c).map_err(|_| {
                ExecutorError::MalformedTask(format!("dedup column {c:?} is not an output column"))
            })
        })
        .collect()
}

/// Runs a deduplicating query's reduce task.
pub async fn run(
    task: &TaskAssignment,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let malformed = |m: &str| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let (Some(dedup), Some(event)) = (&task.dedup, &task.event_time) else {
        return Err(malformed("a dedup task needs dedup and event_time"));
    };
    let stage::Assigned {
        reduce,
        plan,
        files,
        input_schema,
        tables,
    } = stage::assigned(task, &caches).await?;
    let empty = Box::pin(futures::stream::empty());
    // Planned, not run: the schema of the rows the map tasks shuffled.
    let schema = sluice_sql::run(
        &plan.sql,
        input_schema,
        empty,
        &tables,
        sluice_sql::guard::budget_ms(plan.plan_budget_ms),
    )
    .await?
    .schema();
    let keys = key_columns(&schema, &dedup.columns)?;
    let time = schema
        .index_of(&event.column)
        .map_err(|_| malformed("the watermark column is not an output column"))?;
    let state_schema = state_schema(&schema, &keys);
    let store = stage::open_store(&caches, &reduce.checkpoint).await?;
    let rows = stage::read_partials(&store, task.batch_id, reduce, &schema).await?;
    let rows = concat_batches(&schema, &rows).map_err(fail)?;
    let mut table = stage::state(
        &caches,
        &store,
        task,
        reduce,
        state_schema.clone(),
        keys.len(),
    )
    .await?;
    stage::snapshot(
        &caches,
        &store,
        reduce,
        task.partition,
        stage::due(reduce, &table),
    );
    let within = i64::try_from(dedup.within_ms).unwrap_or(i64::MAX);
    let candidates = state_rows(&rows, &keys, time, within, &state_schema)?;
    let first = table.first_new(&candidates)?;
    let emitted = stage::filter(&rows, &first)?;
    let added = stage::filter(&candidates, &first)?;
    let expiry = (keys.len(), WindowEnd::Plus(0));
    let evict = |rows: &RecordBatch| match event.watermark_ms {
        Some(wm) => stage::closed(rows, expiry, wm).map(Some),
        None => Ok(None),
    };
    stage::advance(&mut table, &store, task, reduce, added, evict).await?;
    stage::bound(&caches, task, &table)?;
    let layout = stage::layout(files, task);
    let written = stage::write(&caches, &files.path, layout, schema.clone(), vec![emitted]).await?;
    Ok(stage::done(&caches, task, table, written, started))
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("dedup: {e}"))
}

/// A state row: the key columns, then the expiry.
fn state_schema(rows: &SchemaRef, keys: &[usize]) -> SchemaRef {
    let mut fields: Vec<Field> = keys.iter().map(|&i| rows.field(i).clone()).collect();
    fields.push(Field::new(
        EXPIRES,
        DataType::Timestamp(TimeUnit::Millisecond, None),
        true,
    ));
    Arc::new(Schema::new(fields))
}

/// Each row's would-be state row: its key, and its event time plus
/// `within` milliseconds.
fn state_rows(
    rows: &RecordBatch,
    keys: &[usize],
    time: usize,
    within: i64,
    schema: &SchemaRef,
) -> Result<RecordBatch, ExecutorError> {
    let ms = arrow_cast::cast(
        rows.column(time),
        &DataType::Timestamp(TimeUnit::Millisecond, None),
    )
    .map_err(fail)?;
    let ms = ms
        .as_any()
        .downcast_ref::<arrow_array::TimestampMillisecondArray>();
    let ms = ms.ok_or_else(|| ExecutorError::TaskPanicked("event time cast".into()))?;
    let expires: arrow_array::TimestampMillisecondArray = ms
        .iter()
        .map(|t| t.map(|t| t.saturating_add(within)))
        .collect();
    let mut columns: Vec<ArrayRef> = keys.iter().map(|&i| rows.column(i).clone()).collect();
    columns.push(Arc::new(expires));
    RecordBatch::try_new(schema.clone(), columns).map_err(fail)
}
