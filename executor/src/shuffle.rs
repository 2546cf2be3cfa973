//! The map stage of a stateful query: the task's input, through the SQL
//! up to each operator side that reads its stream (an aggregation's
//! partial rows, a join's side, a top-N's rows), split by that operator's
//! key into the query's state partitions, and written as one create-only
//! shuffle file. A reduce task that feeds another operator shuffles its
//! output the same way ([`Keyer`], [`encode`]).
//!
//! ```text
//!  input ─► SQL up to operator side ─► split by hash(key) % buckets   (for each side)
//!        ─► shuffle/<N>/<map>.arrow = [side 0: bucket 0][bucket 1]...[side 1: ...]  (create-only)
//!        ─► TaskOutput{shuffle: a byte range per (operator, side, bucket)}
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
use sluice_sql::{Aggregation, Graph, Kind, StreamJoin, TopN};

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
        let none = |(op, side)| Part::empty(op, side, &plan.input_schema, shuffle.buckets);
        let parts = match &rows {
            Rows::Dedup(_) => vec![none((0, 0))],
            Rows::Sides(s) => s.sides.iter().map(|s| none((s.operator, s.side))).collect(),
        };
        return Ok(TaskOutput {
            duration_ms: started.elapsed().as_millis() as u64,
            shuffle: encode(parts, (0, plan.partition))?.1,
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
        store.write_shuffle(batch, (0, map), bytes).await?;
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

/// The blocking half: the task's input through the query up to each
/// operator side that reads its stream, split and encoded.
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
    let mut parts = Vec::new();
    match shuffled {
        Rows::Dedup(d) => {
            let out =
                runtime.block_on(sluice_sql::run(sql, streams, input, &opened.tables, limits))?;
            let schema = out.schema();
            let keys = crate::operator::key_columns(&schema, &d.columns)?;
            let rows = drain(out, runtime, &opened)?;
            let buckets = split(&rows, buckets, |b| Ok(columns(b, &keys)))?;
            parts.push(Part::new((0, 0), schema, buckets));
        }
        Rows::Sides(sides) => {
            let graph =
                runtime.block_on(Graph::plan(sql, streams, input, &opened.tables, limits))?;
            for s in &sides.sides {
                let (op, side) = (s.operator as usize, s.side as usize);
                if op >= graph.len() || side >= graph.sources(op).len() {
                    return Err(ExecutorError::MalformedTask(format!(
                        "a shuffle for side {side} of operator {op}, which the query has not"
                    )));
                }
                let rows = drain(graph.map(op, side)?, runtime, &opened)?;
                let keyer = Keyer::of(&graph, op, side)?;
                let buckets = split(&rows, buckets, |b| keyer.keys(b))?;
                parts.push(Part::new(
                    (s.operator, s.side),
                    graph.side_schema(op, side),
                    buckets,
                ));
            }
        }
    }
    let rows = parts.iter().map(Part::rows).sum();
    let (bytes, ranges) = encode(parts, (0, plan.partition))?;
    let produced = opened.produced(crate::output::Emitted { rows });
    Ok((produced, bytes, ranges))
}

/// How the rows of one side of an operator are keyed for the shuffle.
pub enum Keyer {
    /// By these columns (an aggregation's group key, less its session).
    Columns(Vec<usize>),
    /// By a join's key expressions of this side.
    Join(Box<StreamJoin>, usize),
    /// By a top-N's `PARTITION BY`.
    TopN(Box<TopN>),
    /// By an aggregation's group key, evaluated over its input rows (the
    /// changes an aggregation feeds it).
    Groups(Box<Aggregation>),
}

impl Keyer {
    /// The key of side `side` of `graph`'s operator `op`.
    pub fn of(graph: &Graph, op: usize, side: usize) -> Result<Self, ExecutorError> {
        Ok(match graph.kind(op) {
            Kind::Aggregate => {
                let agg = Aggregation::of(graph, op)?;
                // A key's sessions merge in one partition: its session is
                // not part of the shuffle key.
                let keys = (0..agg.key_columns()).filter(|&i| Some(i) != agg.session());
                Keyer::Columns(keys.collect())
            }
            Kind::Join => Keyer::Join(Box::new(StreamJoin::of(graph, op)?), side),
            Kind::TopN => Keyer::TopN(Box::new(TopN::of(graph, op)?)),
        })
    }

    /// The key of the changes operator `op` of `graph` (an aggregation)
    /// reads.
    pub fn changes(graph: &Graph, op: usize) -> Result<Self, ExecutorError> {
        Ok(Keyer::Groups(Box::new(Aggregation::of(graph, op)?)))
    }

    pub fn keys(&self, b: &RecordBatch) -> Result<Vec<ArrayRef>, ExecutorError> {
        Ok(match self {
            Keyer::Groups(agg) => agg.group_of(b)?,
            Keyer::Columns(keys) => columns(b, keys),
            Keyer::Join(join, side) => join.keys(*side, b)?,
            Keyer::TopN(top) => top.keys(b)?,
        })
    }
}

/// One operator side's rows, split into buckets.
pub struct Part {
    /// The operator and its side.
    to: (u32, u32),
    schema: SchemaRef,
    buckets: Vec<Vec<RecordBatch>>,
}

impl Part {
    pub fn new(to: (u32, u32), schema: SchemaRef, buckets: Vec<Vec<RecordBatch>>) -> Self {
        Part {
            to,
            schema,
            buckets,
        }
    }

    fn empty(op: u32, side: u32, schema: &SchemaRef, buckets: u32) -> Self {
        Part::new(
            (op, side),
            schema.clone(),
            vec![Vec::new(); buckets as usize],
        )
    }

    fn rows(&self) -> u64 {
        self.buckets
            .iter()
            .flatten()
            .map(|b| b.num_rows() as u64)
            .sum()
    }
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
        let mut picks: Vec<Vec<u32>> = vec![Vec::new(); buckets as usize];
        for (i, n) in buckets_of(&keys(b)?, b.num_rows(), buckets)?
            .into_iter()
            .enumerate()
        {
            picks[n as usize].push(i as u32);
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

/// The bucket, of `buckets`, of each of `rows` rows whose key is
/// `columns` (one array per key column): [`bucket`] of the key's row
/// bytes; bucket 0 for every row without a key (a global aggregate).
pub fn buckets_of(
    columns: &[ArrayRef],
    rows: usize,
    buckets: u32,
) -> Result<Vec<u32>, ExecutorError> {
    if columns.is_empty() {
        return Ok(vec![0; rows]);
    }
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields).map_err(fail)?;
    let keyed = converter.convert_columns(columns).map_err(fail)?;
    Ok(keyed.iter().map(|r| bucket(r.as_ref(), buckets)).collect())
}

/// The parts as one file, an IPC stream per non-empty bucket, and each
/// bucket's byte range in it, written by `writer` (stage, number).
pub fn encode(
    parts: Vec<Part>,
    (stage, writer): (u32, u32),
) -> Result<(Bytes, Vec<ShuffleRange>), ExecutorError> {
    let mut file = BytesMut::new();
    let mut ranges = Vec::new();
    for part in parts {
        for (b, bucket) in part.buckets.into_iter().enumerate() {
            let rows: u64 = bucket.iter().map(|b| b.num_rows() as u64).sum();
            let offset = file.len() as u64;
            if rows > 0 {
                file.extend_from_slice(&codec::encode(&part.schema, &bucket)?);
            }
            ranges.push(ShuffleRange {
                map: writer,
                offset,
                length: file.len() as u64 - offset,
                rows,
                table: String::new(),
                operator: part.to.0,
                side: part.to.1,
                bucket: b as u32,
                stage,
            });
        }
    }
    Ok((file.freeze(), ranges))
}
