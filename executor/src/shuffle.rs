//! The map stage of a stateful query: the task's input, aggregated into
//! partial rows, split by key into the query's state partitions, and
//! written as one create-only shuffle file.
//!
//! ```text
//!  input ─► SQL up to the aggregation ─► Partial aggregate ─► split by hash(key) % buckets
//!        ─► shuffle/<N>/<map>.arrow = [IPC stream of bucket 0][bucket 1]...  (create-only)
//!        ─► TaskOutput{shuffle: one byte range per bucket}
//! ```
//!
//! The hash is xxHash64 of the key in Arrow's row format: every executor
//! places a key in the same bucket, whatever its build or machine.
//! A retry writes the same bytes; one that finds the file adopts it.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use bytes::{Bytes, BytesMut};
use sluice_proto::shuffle_map_work::Rows;
use sluice_proto::{ShuffleMapWork, ShuffleRange, TaskOutput};
use sluice_sql::{Aggregation, StreamJoin, TopN};

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::map::{Produced, TaskPlan, open_input};
use crate::state::codec;

/// Runs a stateful query's map task.
pub async fn run(
    plan: TaskPlan,
    shuffle: &ShuffleMapWork,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let Some(rows) = shuffle.rows.clone() else {
        return Err(ExecutorError::MalformedTask("a shuffle of no rows".into()));
    };
    if shuffle.buckets == 0 {
        return Err(ExecutorError::MalformedTask(
            "a shuffle with no buckets".into(),
        ));
    }
    let planned = plan.source.planned_rows();
    if planned == Some(0) {
        let none = vec![Vec::new(); shuffle.buckets as usize];
        return Ok(TaskOutput {
            duration_ms: started.elapsed().as_millis() as u64,
            shuffle: encode(&plan.input_schema, none, plan.partition)?.1,
            ..Default::default()
        });
    }
    let (batch, map) = (plan.batch_id, plan.partition);
    let runtime = tokio::runtime::Handle::current();
    let blocking = caches.clone();
    let buckets = shuffle.buckets;
    let (produced, bytes, ranges) =
        tokio::task::spawn_blocking(move || partials(plan, &rows, buckets, &runtime, &blocking))
            .await
            .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    produced.check(planned)?;
    if !bytes.is_empty() {
        let store = crate::stage::open_store(&caches, &shuffle.checkpoint).await?;
        store.write_shuffle(batch, map, bytes).await?;
    }
    Ok(TaskOutput {
        duration_ms: started.elapsed().as_millis() as u64,
        input_rows: produced.input_rows,
        bad_records: produced.bad_records,
        records_lost: produced.records_lost,
        rows_dropped_by_watermark: produced.dropped,
        max_event_time_ms: produced.max_event_time_ms,
        shuffle: ranges,
        ..Default::default()
    })
}

/// The blocking half: the partial rows of the task's input, encoded.
fn partials(
    plan: TaskPlan,
    shuffled: &Rows,
    buckets: u32,
    runtime: &tokio::runtime::Handle,
    caches: &Caches,
) -> Result<(Produced, Bytes, Vec<ShuffleRange>), ExecutorError> {
    let (input, opened) = open_input(plan.source, &plan.tables, plan.late, runtime, caches)?;
    let (sql, streams, limits) = (
        &plan.sql,
        plan.streams.clone(),
        caches.task_limits(plan.budget),
    );
    let (schema, rows, split) = match shuffled {
        Rows::Aggregate(_) => {
            let agg = runtime
                .block_on(Aggregation::plan(
                    sql,
                    streams,
                    Box::pin(input),
                    &opened.tables,
                    limits,
                ))?
                .ok_or_else(|| {
                    ExecutorError::MalformedTask(
                        "a shuffle for a query without an aggregation".into(),
                    )
                })?;
            let rows = drain(agg.map()?, runtime, &opened)?;
            // A key's sessions merge in one partition: its session is not
            // part of the shuffle key.
            let keys: Vec<usize> = (0..agg.key_columns())
                .filter(|&i| Some(i) != agg.session())
                .collect();
            let split = split(&rows, buckets, |b| Ok(columns(b, &keys)))?;
            (agg.partial_schema(), rows, split)
        }
        Rows::Dedup(d) => {
            let out = runtime.block_on(sluice_sql::run(
                sql,
                streams,
                Box::pin(input),
                &opened.tables,
                limits,
            ))?;
            let schema = out.schema();
            let keys = crate::operator::key_columns(&schema, &d.columns)?;
            let rows = drain(out, runtime, &opened)?;
            let split = split(&rows, buckets, |b| Ok(columns(b, &keys)))?;
            (schema, rows, split)
        }
        Rows::Join(_) => {
            let reading = streams.reading.clone();
            let join = runtime
                .block_on(StreamJoin::plan(
                    sql,
                    streams,
                    Box::pin(input),
                    &opened.tables,
                    limits,
                ))?
                .ok_or_else(|| {
                    ExecutorError::MalformedTask(
                        "a join shuffle for a query without a join of two streams".into(),
                    )
                })?;
            let side = join
                .sides()
                .iter()
                .position(|s| *s == reading)
                .ok_or_else(|| {
                    ExecutorError::MalformedTask(format!(
                        "the join does not read the stream {reading:?}"
                    ))
                })?;
            let rows = drain(join.map(side)?, runtime, &opened)?;
            let split = split(&rows, buckets, |b| Ok(join.keys(side, b)?))?;
            (join.side_schema(side), rows, split)
        }
        Rows::TopN(_) => {
            let top = runtime
                .block_on(TopN::plan(
                    sql,
                    streams,
                    Box::pin(input),
                    &opened.tables,
                    limits,
                ))?
                .ok_or_else(|| {
                    ExecutorError::MalformedTask(
                        "a top-N shuffle for a query without a top-N".into(),
                    )
                })?;
            let rows = drain(top.map()?, runtime, &opened)?;
            let split = split(&rows, buckets, |b| Ok(top.keys(b)?))?;
            (top.row_schema(), rows, split)
        }
    };
    let (bytes, ranges) = encode(&schema, split, plan.partition)?;
    let produced = opened.produced(crate::output::Emitted {
        rows: rows.iter().map(|b| b.num_rows() as u64).sum(),
        discarded_bytes: 0,
    });
    Ok((produced, bytes, ranges))
}

/// The columns `keys` of `b`.
fn columns(b: &RecordBatch, keys: &[usize]) -> Vec<ArrayRef> {
    keys.iter().map(|&i| b.column(i).clone()).collect()
}

/// Every non-empty batch of `output`, then the rest of the input; a
/// failure of the input is its own.
fn drain(
    mut output: sluice_sql::Output,
    runtime: &tokio::runtime::Handle,
    opened: &crate::map::Opened,
) -> Result<Vec<RecordBatch>, ExecutorError> {
    let mut rows = Vec::new();
    while let Some(b) = runtime.block_on(output.next()) {
        match b {
            Ok(b) if b.num_rows() > 0 => rows.push(b),
            Ok(_) => {}
            Err(e) => return Err(opened.failure.take().unwrap_or(e.into())),
        }
    }
    runtime
        .block_on(output.read_rest())
        .map_err(|e| opened.failure.take().unwrap_or(e.into()))?;
    Ok(rows)
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("shuffle: {e}"))
}

/// The bucket of each key: xxHash64 of its row bytes, modulo `buckets`.
pub fn bucket(key: &[u8], buckets: u32) -> u32 {
    (twox_hash::XxHash64::oneshot(0, key) % u64::from(buckets)) as u32
}

/// Rows split into `buckets` by the hash of their key (`keys` of a
/// batch: one array per key column), keeping their order within each
/// bucket. Without a key (a global aggregate) every row goes to bucket 0.
pub fn split(
    rows: &[RecordBatch],
    buckets: u32,
    keys: impl Fn(&RecordBatch) -> Result<Vec<ArrayRef>, ExecutorError>,
) -> Result<Vec<Vec<RecordBatch>>, ExecutorError> {
    let mut out: Vec<Vec<RecordBatch>> = vec![Vec::new(); buckets as usize];
    for b in rows {
        let columns = keys(b)?;
        if columns.is_empty() {
            out[0].push(b.clone());
            continue;
        }
        let fields = columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(fail)?;
        let keyed = converter.convert_columns(&columns).map_err(fail)?;
        let mut picks: Vec<Vec<u32>> = vec![Vec::new(); buckets as usize];
        for (i, r) in keyed.iter().enumerate() {
            picks[bucket(r.as_ref(), buckets) as usize].push(i as u32);
        }
        for (n, pick) in picks.into_iter().enumerate() {
            if !pick.is_empty() {
                let taken = arrow_select::take::take_record_batch(b, &UInt32Array::from(pick))
                    .map_err(fail)?;
                out[n].push(taken);
            }
        }
    }
    Ok(out)
}

/// The buckets as one file, an IPC stream per non-empty bucket, and each
/// bucket's byte range in it.
pub fn encode(
    schema: &SchemaRef,
    buckets: Vec<Vec<RecordBatch>>,
    map: u32,
) -> Result<(Bytes, Vec<ShuffleRange>), ExecutorError> {
    let mut file = BytesMut::new();
    let mut ranges = Vec::with_capacity(buckets.len());
    for bucket in buckets {
        let rows: u64 = bucket.iter().map(|b| b.num_rows() as u64).sum();
        let offset = file.len() as u64;
        if rows > 0 {
            file.extend_from_slice(&codec::encode(schema, &bucket)?);
        }
        ranges.push(ShuffleRange {
            map,
            offset,
            length: file.len() as u64 - offset,
            rows,
            table: String::new(),
        });
    }
    Ok((file.freeze(), ranges))
}
