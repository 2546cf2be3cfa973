//! The join of two streams: each side's rows buffered in the state
//! partition of their key until the watermark passes their event-time
//! bound, each new row matched with the other side's buffered and new rows.
//!
//! ```text
//!  new left ⋈ (buffered right ∪ new right)  ∪  buffered left ⋈ new right ─► joined ─► output
//!  state += new rows (side, id, matched, the side's columns)   matched flags of an outer side updated
//!  evict: a left row once watermark > its time + upper bound (no later right row can match),
//!         a right row once watermark > its time - lower bound
//!  an outer side's evicted rows that never matched ─► padded with NULLs ─► output, once
//!  a new row whose bound time is NULL ─► matches nothing, never held:
//!         an outer side's padded with NULLs ─► output at once; an inner side's dropped; counted
//! ```
//!
//! A state row is `__sluice_side` (0 left, 1 right), `__sluice_id` (the
//! batch in the high 32 bits, the row's place among the batch's rows of
//! its side in the partition below), `__sluice_matched`, then the left
//! columns and the right columns, the other side's NULL. Its key is (side,
//! id). Matched flags are kept for the sides whose unmatched rows are
//! emitted; an inner side's stay false.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, UInt8Array, UInt64Array, new_null_array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow_select::concat::concat_batches;
use sluice_proto::{JoinWork, TaskAssignment};
use sluice_sql::{Graph, StreamJoin};

use super::{Advanced, Operator, Shuffled};
use crate::error::ExecutorError;
use crate::shuffle;
use crate::stage::{self, Assigned};
use crate::state::rescale::Repartition;
use crate::state::table::StateTable;

/// The leading columns of a state row: side, id, matched.
const META: usize = 3;

/// A query's join of two streams.
pub struct Join {
    join: StreamJoin,
    batch: u64,
    /// Whether each side's rows may leave the state by the bound.
    evict: [bool; 2],
    state: SchemaRef,
}

impl Repartition for Join {
    /// By the join key of each buffered row's side.
    fn route(&self, rows: &RecordBatch, partitions: u32) -> Result<Vec<u32>, ExecutorError> {
        let mut routed = [Vec::new(), Vec::new()];
        for (side, out) in routed.iter_mut().enumerate() {
            let held = self.buffered(rows, side)?.rows;
            let keys = self.join.keys(side, &held)?;
            *out = shuffle::buckets_of(&keys, held.num_rows(), partitions)?;
        }
        let sides = rows
            .column(0)
            .as_primitive::<arrow_array::types::UInt8Type>();
        let mut next = [0usize; 2];
        sides
            .values()
            .iter()
            .map(|&s| {
                let s = side_index(u32::from(s))?;
                next[s] += 1;
                Ok(routed[s][next[s] - 1])
            })
            .collect()
    }

    /// A row's id is unique only within its partition: gathered rows are
    /// numbered again, in order, below the ids of any later batch (which
    /// start at `batch << 32`, batch ≥ 1).
    fn gathered(&self, rows: RecordBatch) -> Result<RecordBatch, ExecutorError> {
        let mut columns = rows.columns().to_vec();
        columns[1] = Arc::new(UInt64Array::from_iter_values(0..rows.num_rows() as u64));
        RecordBatch::try_new(rows.schema(), columns).map_err(fail)
    }
}

impl Operator for Join {
    type Work = JoinWork;

    async fn plan(
        task: &TaskAssignment,
        work: &JoinWork,
        _assigned: &Assigned<'_>,
        (graph, index): (&Graph, usize),
    ) -> Result<Self, ExecutorError> {
        let join = StreamJoin::of(graph, index)?;
        Ok(Join {
            state: state_schema(&join),
            join,
            batch: task.batch_id,
            evict: [work.evict_left, work.evict_right],
        })
    }

    fn input_schema(&self, side: u32) -> Result<SchemaRef, ExecutorError> {
        Ok(self.join.side_schema(side_index(side)?))
    }

    fn state_schema(&self) -> (SchemaRef, usize) {
        (self.state.clone(), 2)
    }

    fn output_schema(&self) -> SchemaRef {
        self.join.output_schema()
    }

    async fn advance(
        &self,
        state: &StateTable,
        rows: Vec<Shuffled>,
    ) -> Result<Advanced, ExecutorError> {
        let (new, untimed) = self.split_untimed(self.new_rows(rows)?)?;
        let held = state.scan()?;
        let old = [self.buffered(&held, 0)?, self.buffered(&held, 1)?];
        let with_ids = |side: usize, r: &Side| r.with_id(&self.join.side_schema(side));
        let (new_l, new_r) = (with_ids(0, &new[0])?, with_ids(1, &new[1])?);
        let (old_l, old_r) = (with_ids(0, &old[0])?, with_ids(1, &old[1])?);
        let a = self
            .join
            .matches(vec![new_l], vec![old_r, new_r.clone()])
            .await?;
        let b = self.join.matches(vec![old_l], vec![new_r]).await?;
        let matched = [
            a.left_ids
                .iter()
                .chain(&b.left_ids)
                .copied()
                .collect::<HashSet<u64>>(),
            a.right_ids.iter().chain(&b.right_ids).copied().collect(),
        ];
        let mut joined = a.joined;
        joined.extend(b.joined);
        for (side, rows) in untimed.iter().enumerate() {
            if self.join.outer()[side] && rows.rows.num_rows() > 0 {
                joined.push(self.join.padded(side, &rows.rows)?);
            }
        }
        let joined = concat_batches(&self.join.join_schema(), &joined).map_err(fail)?;
        let mut upserts = Vec::new();
        for side in 0..2 {
            let held = self.state_rows(side, &new[side], |id| matched[side].contains(&id))?;
            // Invariant: a new row's id holds this batch, which no earlier
            // batch's row has (ids are numbered again below later batches'
            // on a rescale).
            state.vouch_new(&held)?;
            upserts.push(held);
            if self.join.outer()[side] {
                let newly = old[side].filter(|id, was| !was && matched[side].contains(&id))?;
                upserts.push(self.state_rows(side, &newly, |_| true)?);
            }
        }
        Ok(Advanced {
            deletes: None,
            upserts: concat_batches(&self.state, &upserts).map_err(fail)?,
            pending: Some(joined),
            retracted: None,
            unmatchable: untimed.iter().map(|s| s.rows.num_rows() as u64).sum(),
        })
    }

    fn evict(
        &self,
        state: &StateTable,
        watermark: Option<i64>,
    ) -> Result<Option<RecordBatch>, ExecutorError> {
        let (Some(bound), Some(wm)) = (self.join.bound(), watermark) else {
            return Ok(None);
        };
        let rows = &state.scan()?;
        let sides = rows
            .column(0)
            .as_primitive::<arrow_array::types::UInt8Type>();
        let width = self.join.side_schema(0).fields().len();
        let times = |i: usize| millis(rows.column(META + i));
        let (left_ts, right_ts) = (times(bound.left)?, times(width + bound.right)?);
        let (left_ts, right_ts) = (
            left_ts.as_primitive::<TimestampMillisecondType>(),
            right_ts.as_primitive::<TimestampMillisecondType>(),
        );
        let keep: BooleanArray = (0..rows.num_rows())
            .map(|r| {
                let gone = match sides.value(r) {
                    0 => passed(
                        self.evict[0],
                        left_ts,
                        r,
                        bound.upper_ms,
                        |t, u| t.checked_add(u),
                        wm,
                    ),
                    _ => passed(
                        self.evict[1],
                        right_ts,
                        r,
                        bound.lower_ms,
                        |t, l| t.checked_sub(l),
                        wm,
                    ),
                };
                Some(gone)
            })
            .collect();
        stage::filter(rows, &keep).map(Some)
    }

    async fn emit(
        &self,
        advanced: Advanced,
        evicted: RecordBatch,
        _state: &StateTable,
    ) -> Result<Vec<RecordBatch>, ExecutorError> {
        let mut joined: Vec<RecordBatch> = advanced
            .pending
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .collect();
        for side in 0..2 {
            if !self.join.outer()[side] {
                continue;
            }
            let gone = self.buffered(&evicted, side)?;
            let unmatched = gone.filter(|_, matched| !matched)?;
            if unmatched.rows.num_rows() > 0 {
                joined.push(self.join.padded(side, &unmatched.rows)?);
            }
        }
        if joined.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.join.finish(joined).await?)
    }
}

/// Whether a buffered row's time plus (or minus) the bound has fallen
/// behind the watermark. A row without a time matches nothing and leaves
/// (a state written before such rows were kept out of it); a row of a
/// side that may not be evicted stays.
fn passed(
    may: bool,
    times: &arrow_array::PrimitiveArray<TimestampMillisecondType>,
    row: usize,
    bound: Option<i64>,
    shift: impl Fn(i64, i64) -> Option<i64>,
    watermark: i64,
) -> bool {
    if times.is_null(row) {
        return true;
    }
    let (true, Some(b)) = (may, bound) else {
        return false;
    };
    shift(times.value(row), b).is_some_and(|last| last < watermark)
}

/// A side's rows, with their ids and matched flags.
struct Side {
    rows: RecordBatch,
    ids: Vec<u64>,
    matched: Vec<bool>,
}

impl Side {
    /// The rows with their id as a last column, as the join matches them.
    fn with_id(&self, schema: &SchemaRef) -> Result<RecordBatch, ExecutorError> {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(sluice_sql::JOIN_ID, DataType::UInt64, false));
        let mut columns = self.rows.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from(self.ids.clone())));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(fail)
    }

    /// The rows for which `keep(id, matched)` holds.
    fn filter(&self, keep: impl Fn(u64, bool) -> bool) -> Result<Side, ExecutorError> {
        let mask: BooleanArray = self
            .ids
            .iter()
            .zip(&self.matched)
            .map(|(&id, &m)| Some(keep(id, m)))
            .collect();
        self.select(&mask)
    }

    /// The rows `mask` selects.
    fn select(&self, mask: &BooleanArray) -> Result<Side, ExecutorError> {
        Ok(Side {
            rows: stage::filter(&self.rows, mask)?,
            ids: self
                .ids
                .iter()
                .zip(mask.values())
                .filter(|(_, k)| *k)
                .map(|(x, _)| *x)
                .collect(),
            matched: self
                .matched
                .iter()
                .zip(mask.values())
                .filter(|(_, k)| *k)
                .map(|(m, _)| *m)
                .collect(),
        })
    }
}

/// A join's side, 0 (left) or 1 (right).
fn side_index(side: u32) -> Result<usize, ExecutorError> {
    match side {
        0 | 1 => Ok(side as usize),
        s => Err(ExecutorError::MalformedTask(format!(
            "rows for side {s} of a join, which has two"
        ))),
    }
}

impl Join {
    /// This batch's rows of each side, with their ids.
    fn new_rows(&self, rows: Vec<Shuffled>) -> Result<[Side; 2], ExecutorError> {
        let mut by_side: [Vec<RecordBatch>; 2] = [Vec::new(), Vec::new()];
        for s in rows {
            by_side[side_index(s.side)?].push(s.rows);
        }
        let side = |i: usize, batches: &[RecordBatch]| -> Result<Side, ExecutorError> {
            let rows = concat_batches(&self.join.side_schema(i), batches).map_err(fail)?;
            let n = rows.num_rows() as u64;
            if n >= 1 << 32 {
                return Err(ExecutorError::TaskPanicked(format!(
                    "a join partition's batch has {n} rows of one side, past 2^32"
                )));
            }
            let base = self.batch << 32;
            Ok(Side {
                ids: (base..base + n).collect(),
                matched: vec![false; n as usize],
                rows,
            })
        };
        Ok([side(0, &by_side[0])?, side(1, &by_side[1])?])
    }

    /// This batch's rows of each side split by their time, when the join
    /// has a bound: those with a time, then those whose bound column is
    /// NULL. Those match no row (the bound's comparison with them is NULL,
    /// and the bound is a conjunct of the condition), so they are never
    /// held: a NULL time can never fall behind the watermark.
    fn split_untimed(&self, new: [Side; 2]) -> Result<([Side; 2], [Side; 2]), ExecutorError> {
        let column = |side: usize| {
            let b = self.join.bound()?;
            Some(if side == 0 { b.left } else { b.right })
        };
        let split = |side: usize, rows: Side| -> Result<(Side, Side), ExecutorError> {
            let times = column(side).map(|c| rows.rows.column(c).clone());
            let null = |r: usize| times.as_ref().is_some_and(|t| t.is_null(r));
            let n = rows.rows.num_rows();
            let timed: BooleanArray = (0..n).map(|r| Some(!null(r))).collect();
            let untimed: BooleanArray = (0..n).map(|r| Some(null(r))).collect();
            Ok((rows.select(&timed)?, rows.select(&untimed)?))
        };
        let [l, r] = new;
        let ((l, l_untimed), (r, r_untimed)) = (split(0, l)?, split(1, r)?);
        Ok(([l, r], [l_untimed, r_untimed]))
    }

    /// The buffered rows of `side` among state rows `rows`.
    fn buffered(&self, rows: &RecordBatch, side: usize) -> Result<Side, ExecutorError> {
        let sides = rows
            .column(0)
            .as_primitive::<arrow_array::types::UInt8Type>();
        let mask: BooleanArray = sides.iter().map(|s| Some(s == Some(side as u8))).collect();
        let picked = stage::filter(rows, &mask)?;
        let width = self.join.side_schema(0).fields().len();
        let schema = self.join.side_schema(side);
        let first = META + if side == 0 { 0 } else { width };
        let columns = (0..schema.fields().len())
            .map(|i| cast(picked.column(first + i), schema.field(i).data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = RecordBatch::try_new(schema, columns).map_err(fail)?;
        let ids = picked
            .column(1)
            .as_primitive::<arrow_array::types::UInt64Type>();
        Ok(Side {
            rows,
            ids: ids.values().to_vec(),
            matched: picked
                .column(2)
                .as_boolean()
                .iter()
                .map(|m| m == Some(true))
                .collect(),
        })
    }

    /// `rows` of `side` as state rows, `matched(id)` their flag.
    fn state_rows(
        &self,
        side: usize,
        rows: &Side,
        matched: impl Fn(u64) -> bool,
    ) -> Result<RecordBatch, ExecutorError> {
        let n = rows.rows.num_rows();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt8Array::from(vec![side as u8; n])),
            Arc::new(UInt64Array::from(rows.ids.clone())),
            Arc::new(BooleanArray::from(
                rows.ids.iter().map(|&id| matched(id)).collect::<Vec<_>>(),
            )),
        ];
        for s in 0..2 {
            let schema = self.join.side_schema(s);
            for (i, f) in schema.fields().iter().enumerate() {
                columns.push(match s == side {
                    true => rows.rows.column(i).clone(),
                    false => new_null_array(f.data_type(), n),
                });
            }
        }
        RecordBatch::try_new(self.state.clone(), columns).map_err(fail)
    }
}

/// A state row's schema for `join` (see the module header).
fn state_schema(join: &StreamJoin) -> SchemaRef {
    let mut fields = vec![
        Field::new("__sluice_side", DataType::UInt8, false),
        Field::new("__sluice_id", DataType::UInt64, false),
        Field::new("__sluice_matched", DataType::Boolean, false),
    ];
    for (s, prefix) in ["l", "r"].iter().enumerate() {
        let schema = join.side_schema(s);
        for (i, f) in schema.fields().iter().enumerate() {
            fields.push(Field::new(
                format!("{prefix}{i}"),
                f.data_type().clone(),
                true,
            ));
        }
    }
    Arc::new(Schema::new(fields))
}

/// A buffered column back in its side's type (the state's are nullable).
fn cast(a: &ArrayRef, to: &DataType) -> Result<ArrayRef, ExecutorError> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    arrow_cast::cast(a, to).map_err(fail)
}

/// A time column in milliseconds.
fn millis(a: &ArrayRef) -> Result<ArrayRef, ExecutorError> {
    arrow_cast::cast(a, &DataType::Timestamp(TimeUnit::Millisecond, None)).map_err(fail)
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("join: {e}"))
}
