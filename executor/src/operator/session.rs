//! Session windows of an aggregation (`GROUP BY k, session_window(ts,
//! gap)`): a key's sessions that overlap or touch are merged, within a
//! batch and with the sessions kept from earlier ones.
//!
//! ```text
//!  partial rows P (each session [ts, ts + gap), or merged by the map)
//!  state: every session of P's keys ─► O
//!  O ++ P, by (key, start) ─► runs of sessions each starting at or before the run's end so far
//!  runs with a row of P ─► each member's session replaced by the run's ─► merged (PartialReduce)
//!    ─► upserts: one state row per such run;  deletes: O's sessions the run absorbed
//! ```
//!
//! A run without a row of P is left as it is. Sessions only grow and
//! merge, so the sessions of a key stay disjoint and no two of them touch.
//! A session whose start is NULL (a NULL event time) is its own run.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StructArray, TimestampMillisecondArray, UInt32Array,
};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, TimeUnit};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;
use sluice_sql::Aggregation;

use crate::error::ExecutorError;
use crate::stage;
use crate::state::table::StateTable;

/// A session's start and end, in milliseconds; NULL for a NULL event
/// time.
type Bounds = (Option<i64>, Option<i64>);

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("session windows: {e}"))
}

/// The batch's change to the sessions of its keys: the merged sessions
/// to upsert, and the kept sessions they absorbed, to delete.
pub async fn advance(
    agg: &Aggregation,
    session: usize,
    state: &StateTable,
    partials: Vec<RecordBatch>,
) -> Result<(RecordBatch, RecordBatch), ExecutorError> {
    let schema = agg.partial_schema();
    let new = concat_batches(&schema, &partials).map_err(fail)?;
    if new.num_rows() == 0 {
        let none = RecordBatch::new_empty(schema);
        return Ok((none.clone(), none));
    }
    let keys = Keys::new(agg, session)?;
    let old = keys.sessions_of(&state.scan()?, &new)?;
    let all = concat_batches(&schema, [&old, &new]).map_err(fail)?;
    let own = bounds(&all, session)?;
    let runs = runs(&keys.rows(&all)?, &own, old.num_rows());
    let (members, merged): (Vec<u32>, Vec<Bounds>) = runs
        .iter()
        .flat_map(|r| r.members.iter().map(|&m| (m, (r.start, r.end))))
        .unzip();
    let input = with_sessions(
        &take_record_batch(&all, &UInt32Array::from(members.clone())).map_err(fail)?,
        session,
        &merged,
    )?;
    let upserts = concat_batches(&schema, &agg.merge(vec![input]).await?).map_err(fail)?;
    // A kept session whose bounds its run changed leaves the state; one
    // the run kept as it was is replaced by its upsert.
    let absorbed: UInt32Array = members
        .iter()
        .zip(&merged)
        .filter(|(m, run)| (**m as usize) < old.num_rows() && own[**m as usize] != **run)
        .map(|(m, _)| *m)
        .collect();
    let deletes = take_record_batch(&all, &absorbed).map_err(fail)?;
    Ok((upserts, deletes))
}

/// The key columns of a state row besides its session.
struct Keys {
    columns: Vec<usize>,
    converter: RowConverter,
}

impl Keys {
    fn new(agg: &Aggregation, session: usize) -> Result<Self, ExecutorError> {
        let schema = agg.partial_schema();
        let columns: Vec<usize> = (0..agg.key_columns()).filter(|&i| i != session).collect();
        let fields = columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        Ok(Keys {
            columns,
            converter: RowConverter::new(fields).map_err(fail)?,
        })
    }

    fn rows(&self, batch: &RecordBatch) -> Result<Rows, ExecutorError> {
        let columns: Vec<ArrayRef> = self
            .columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        self.converter.convert_columns(&columns).map_err(fail)
    }

    /// The rows of `state` whose key (besides the session) is a key of
    /// `new`: every kept session of the batch's keys. A scan of the state,
    /// which the watermark keeps to the sessions still open.
    fn sessions_of(
        &self,
        state: &RecordBatch,
        new: &RecordBatch,
    ) -> Result<RecordBatch, ExecutorError> {
        if state.num_rows() == 0 {
            return Ok(state.clone());
        }
        let wanted = self.rows(new)?;
        let wanted: HashSet<&[u8]> = wanted.iter().map(|r| r.data()).collect();
        let kept = self.rows(state)?;
        let keep: BooleanArray = kept
            .iter()
            .map(|r| Some(wanted.contains(r.data())))
            .collect();
        stage::filter(state, &keep)
    }
}

/// The bounds of each row's session.
fn bounds(rows: &RecordBatch, session: usize) -> Result<Vec<Bounds>, ExecutorError> {
    let s = rows
        .column(session)
        .as_struct_opt()
        .ok_or_else(|| ExecutorError::TaskPanicked("a session that is not a struct".into()))?;
    let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
    let start = arrow_cast::cast(s.column(0), &ms).map_err(fail)?;
    let end = arrow_cast::cast(s.column(1), &ms).map_err(fail)?;
    let (start, end) = (
        start.as_primitive::<TimestampMillisecondType>(),
        end.as_primitive::<TimestampMillisecondType>(),
    );
    let at = |a: &TimestampMillisecondArray, r: usize| {
        (s.is_valid(r) && a.is_valid(r)).then(|| a.value(r))
    };
    Ok((0..rows.num_rows())
        .map(|r| (at(start, r), at(end, r)))
        .collect())
}

/// Sessions merged into one: their rows' indices, and the bounds.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    members: Vec<u32>,
    start: Option<i64>,
    end: Option<i64>,
}

/// The runs of sessions that merge, by key then start, that hold a row at
/// or after `first_new` (a row of the batch). Pure: rows in the same order
/// give the same runs in the same order.
fn runs(keys: &Rows, bounds: &[Bounds], first_new: usize) -> Vec<Run> {
    let mut order: Vec<u32> = (0..keys.num_rows() as u32).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (a as usize, b as usize);
        keys.row(a)
            .cmp(&keys.row(b))
            .then(bounds[a].0.cmp(&bounds[b].0))
            .then(a.cmp(&b))
    });
    let mut out = Vec::new();
    let mut current: Option<(Run, bool)> = None;
    for i in order {
        let at = i as usize;
        let (start, end) = bounds[at];
        let joins = current.as_ref().is_some_and(|(run, _)| {
            let prev = run.members[0] as usize;
            keys.row(prev) == keys.row(at)
                && start.is_some()
                && run.end.is_some()
                && start <= run.end
        });
        if joins {
            let (run, touched) = current.as_mut().expect("a run to join");
            run.members.push(i);
            run.end = run.end.max(end);
            *touched |= at >= first_new;
            continue;
        }
        if let Some((run, true)) = current.take() {
            out.push(run);
        }
        current = Some((
            Run {
                members: vec![i],
                start,
                end,
            },
            at >= first_new,
        ));
    }
    if let Some((run, true)) = current {
        out.push(run);
    }
    out
}

/// `rows` with the session column `session` replaced by `bounds`.
fn with_sessions(
    rows: &RecordBatch,
    session: usize,
    bounds: &[(Option<i64>, Option<i64>)],
) -> Result<RecordBatch, ExecutorError> {
    let old = rows.column(session).as_struct();
    let starts: TimestampMillisecondArray = bounds.iter().map(|b| b.0).collect();
    let ends: TimestampMillisecondArray = bounds.iter().map(|b| b.1).collect();
    let nulls = starts.nulls().cloned();
    let sessions = StructArray::try_new(
        old.fields().clone(),
        vec![Arc::new(starts), Arc::new(ends)],
        nulls,
    )
    .map_err(fail)?;
    let mut columns = rows.columns().to_vec();
    columns[session] = Arc::new(sessions);
    RecordBatch::try_new(rows.schema(), columns).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[i64]) -> Rows {
        let a: ArrayRef = Arc::new(arrow_array::Int64Array::from(k.to_vec()));
        RowConverter::new(vec![SortField::new(DataType::Int64)])
            .unwrap()
            .convert_columns(&[a])
            .unwrap()
    }

    fn sessions(s: &[(i64, i64)]) -> Vec<Bounds> {
        s.iter().map(|x| (Some(x.0), Some(x.1))).collect()
    }

    #[test]
    fn a_row_that_bridges_two_kept_sessions_merges_them() {
        // Kept: [0, 10) and [20, 30) of key 1, [0, 10) of key 2; new: key
        // 1 at 10 (touches the first) and at 15 (reaches the second).
        let k = keys(&[1, 1, 2, 1, 1]);
        let s = sessions(&[(0, 10), (20, 30), (0, 10), (10, 20), (15, 25)]);
        let runs = runs(&k, &s, 3);
        assert_eq!(
            runs,
            vec![Run {
                members: vec![0, 3, 4, 1],
                start: Some(0),
                end: Some(30)
            }],
            "key 2's session has no new row, and is left alone"
        );
    }

    #[test]
    fn sessions_apart_by_more_than_the_gap_stay_apart() {
        let k = keys(&[7, 7, 7]);
        let s = sessions(&[(0, 10), (11, 21), (30, 40)]);
        let runs = runs(&k, &s, 1);
        let bounds: Vec<Bounds> = runs.iter().map(|r| (r.start, r.end)).collect();
        assert_eq!(bounds, vec![(Some(11), Some(21)), (Some(30), Some(40))]);
    }
}
