//! The join of two streams: each side's rows buffered in the state
//! partition of their key until the watermark passes their event-time
//! bound, each new row matched with the other side's buffered and new rows.
//!
//! ```text
//!  new left ⋈ (buffered right ∪ new right)  ∪  buffered left ⋈ new right ─► joined ─► output
//!  state += new rows (side, time, id, matched, the side's columns)   matched flags of an outer side updated
//!  evict: a left row once watermark > its time + upper bound (no later right row can match),
//!         a right row once watermark > its time - lower bound
//!  an outer side's evicted rows that never matched ─► padded with NULLs ─► output, once
//!  a new row whose bound time is NULL ─► matches nothing, never held:
//!         an outer side's padded with NULLs ─► output at once; an inner side's dropped; counted
//! ```
//!
//! The state rows' layout, keyed by (side, time, id) so that an eviction
//! reads only the rows it removes, is in [`state`]. Matched flags are kept
//! for the sides whose unmatched rows are emitted; an inner side's stay
//! false.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, BooleanArray, RecordBatch, UInt64Array};
use arrow_schema::SchemaRef;
use arrow_select::concat::concat_batches;
use sluice_proto::{JoinWork, TaskAssignment};
use sluice_sql::{Graph, StreamJoin};

use super::{Advanced, Operator, Shuffled};
use crate::error::ExecutorError;
use crate::shuffle;
use crate::stage::Assigned;
use crate::state::rescale::Repartition;
use crate::state::table::StateTable;

use state::{ID, KEYS, Side, Slots, state_schema};

/// A query's join of two streams.
pub struct Join {
    join: StreamJoin,
    batch: u64,
    /// Whether each side's rows may leave the state by the bound.
    evict: [bool; 2],
    state: SchemaRef,
    /// Where each side's columns are in a state row.
    slots: Slots,
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
        columns[ID] = Arc::new(UInt64Array::from_iter_values(0..rows.num_rows() as u64));
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
        let (state, slots) = state_schema(&join);
        Ok(Join {
            state,
            slots,
            join,
            batch: task.batch_id,
            evict: [work.evict_left, work.evict_right],
        })
    }

    fn input_schema(&self, side: u32) -> Result<SchemaRef, ExecutorError> {
        Ok(self.join.side_schema(side_index(side)?))
    }

    fn state_schema(&self) -> (SchemaRef, usize) {
        (self.state.clone(), KEYS)
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
        // A side's buffered rows can match only the other side's new rows:
        // without those, they are not read.
        let old = [
            self.held(state, 0, new[1].rows.num_rows() > 0)?,
            self.held(state, 1, new[0].rows.num_rows() > 0)?,
        ];
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
        let (Some(_), Some(wm)) = (self.join.bound(), watermark) else {
            return Ok(None);
        };
        self.passed(state, wm).map(Some)
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
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("join: {e}"))
}

#[path = "join_state.rs"]
mod state;
