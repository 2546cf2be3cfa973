//! A stream join's state rows: their layout, and the reads of a side's
//! rows, whole or up to a time.
//!
//! A state row is `__sluice_side` (0 left, 1 right), `__sluice_time` (the
//! side's bound column in milliseconds; NULL when the join has no bound),
//! `__sluice_id` (the batch in the high 32 bits, the row's place among the
//! batch's rows of its side in the partition below), `__sluice_matched`,
//! then slots: each holds a left column in left rows and a right column of
//! the same type in right rows ([`Slots`]), so a row carries as few NULLs
//! of the other side as the two sides' types allow.
//! Its key is (side, time, id): a side's rows are one range of keys, in
//! the order of their times, so the rows the watermark has passed are the
//! range's beginning, and an eviction reads those alone.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{TimestampMillisecondType, UInt8Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, TimestampMillisecondArray, UInt8Array, UInt64Array,
    new_null_array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow_select::concat::concat_batches;
use sluice_sql::{Bound, StreamJoin};

use super::{Join, fail};
use crate::error::ExecutorError;
use crate::stage;
use crate::state::table::StateTable;

/// The leading columns of a state row: side, time, id, matched.
pub(super) const META: usize = 4;
/// The columns of a state row's key: side, time, id.
pub(super) const KEYS: usize = 3;
/// Where the id is in a state row.
pub(super) const ID: usize = 2;

const TIME: DataType = DataType::Timestamp(TimeUnit::Millisecond, None);

/// A side's rows, with their ids and matched flags.
pub(super) struct Side {
    pub rows: RecordBatch,
    pub ids: Vec<u64>,
    pub matched: Vec<bool>,
}

impl Side {
    /// The rows with their id as a last column, as the join matches them.
    pub fn with_id(&self, schema: &SchemaRef) -> Result<RecordBatch, ExecutorError> {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(sluice_sql::JOIN_ID, DataType::UInt64, false));
        let mut columns = self.rows.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from(self.ids.clone())));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(fail)
    }

    /// The rows for which `keep(id, matched)` holds.
    pub fn filter(&self, keep: impl Fn(u64, bool) -> bool) -> Result<Side, ExecutorError> {
        let mask: BooleanArray = self
            .ids
            .iter()
            .zip(&self.matched)
            .map(|(&id, &m)| Some(keep(id, m)))
            .collect();
        self.select(&mask)
    }

    /// The rows `mask` selects.
    pub fn select(&self, mask: &BooleanArray) -> Result<Side, ExecutorError> {
        let picked = |i: usize| mask.value(i);
        Ok(Side {
            rows: stage::filter(&self.rows, mask)?,
            ids: (0..self.ids.len())
                .filter(|&i| picked(i))
                .map(|i| self.ids[i])
                .collect(),
            matched: (0..self.matched.len())
                .filter(|&i| picked(i))
                .map(|i| self.matched[i])
                .collect(),
        })
    }
}

/// The first key column's value of `side`'s rows.
fn side_key(side: usize) -> ArrayRef {
    Arc::new(UInt8Array::from(vec![side as u8]))
}

impl Join {
    /// The buffered rows of `side` when `needed`, read by their keys'
    /// prefix (the side leads the key); none otherwise.
    pub(super) fn held(
        &self,
        state: &StateTable,
        side: usize,
        needed: bool,
    ) -> Result<Side, ExecutorError> {
        let rows = match needed {
            true => state.scan_prefix(&[side_key(side)])?,
            false => RecordBatch::new_empty(self.state.clone()),
        };
        self.buffered(&rows, side)
    }

    /// The state rows of `side` whose time is below `cutoff` (ms), those
    /// without a time first: the beginning of the side's range of keys.
    /// `None` reads the rows without a time alone, `Some(i128::MAX)` the
    /// whole side.
    pub(super) fn held_before(
        &self,
        state: &StateTable,
        side: usize,
        cutoff: Option<i128>,
    ) -> Result<RecordBatch, ExecutorError> {
        let below = match cutoff {
            Some(t) if t > i128::from(i64::MAX) => return state.scan_prefix(&[side_key(side)]),
            // No time is below it: the rows without one alone.
            Some(t) if t < i128::from(i64::MIN) => i64::MIN,
            Some(t) => t as i64,
            None => i64::MIN,
        };
        let time: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![below]));
        state.scan_prefix_below(&[side_key(side)], &[side_key(side), time])
    }

    /// The buffered rows of `side` among state rows `rows`.
    pub(super) fn buffered(&self, rows: &RecordBatch, side: usize) -> Result<Side, ExecutorError> {
        let sides = rows.column(0).as_primitive::<UInt8Type>();
        let picked = match sides.values().iter().all(|&s| s == side as u8) {
            true => rows.clone(),
            false => {
                let mask: BooleanArray =
                    sides.iter().map(|s| Some(s == Some(side as u8))).collect();
                stage::filter(rows, &mask)?
            }
        };
        let schema = self.join.side_schema(side);
        let columns = (self.slots.of[side].iter().zip(schema.fields()))
            .map(|(&slot, f)| cast(picked.column(slot), f.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = RecordBatch::try_new(schema, columns).map_err(fail)?;
        Ok(Side {
            rows,
            ids: picked
                .column(ID)
                .as_primitive::<UInt64Type>()
                .values()
                .to_vec(),
            matched: picked
                .column(META - 1)
                .as_boolean()
                .iter()
                .map(|m| m == Some(true))
                .collect(),
        })
    }

    /// `rows` of `side` as state rows, `matched(id)` their flag.
    pub(super) fn state_rows(
        &self,
        side: usize,
        rows: &Side,
        matched: impl Fn(u64) -> bool,
    ) -> Result<RecordBatch, ExecutorError> {
        let n = rows.rows.num_rows();
        let time = match self.join.bound() {
            Some(b) => millis(rows.rows.column(if side == 0 { b.left } else { b.right }))?,
            None => new_null_array(&TIME, n),
        };
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt8Array::from(vec![side as u8; n])),
            time,
            Arc::new(UInt64Array::from(rows.ids.clone())),
            Arc::new(BooleanArray::from(
                rows.ids.iter().map(|&id| matched(id)).collect::<Vec<_>>(),
            )),
        ];
        // Each slot holds the side's column, or NULLs when the side has
        // none there; only those are made.
        let mut slots: Vec<Option<ArrayRef>> = vec![None; self.slots.types.len()];
        for (i, &slot) in self.slots.of[side].iter().enumerate() {
            slots[slot - META] = Some(rows.rows.column(i).clone());
        }
        columns.extend(
            slots
                .into_iter()
                .zip(&self.slots.types)
                .map(|(column, t)| column.unwrap_or_else(|| new_null_array(t, n))),
        );
        RecordBatch::try_new(self.state.clone(), columns).map_err(fail)
    }

    /// The rows of both sides the watermark `wm` has passed, by the
    /// bound: a left row once `wm` > its time + upper bound, a right row
    /// once `wm` > its time − lower bound; a side that may not be evicted
    /// keeps its rows. A row without a time leaves whatever its side (a
    /// state written before such rows were kept out of it).
    pub(super) fn passed(&self, state: &StateTable, wm: i64) -> Result<RecordBatch, ExecutorError> {
        let Some(bound) = self.join.bound() else {
            return Ok(RecordBatch::new_empty(self.state.clone()));
        };
        let mut gone = Vec::with_capacity(2);
        for side in 0..2 {
            let cutoff = cutoff(&bound, side, self.evict[side], wm);
            gone.push(self.held_before(state, side, cutoff)?);
        }
        concat_batches(&self.state, &gone).map_err(fail)
    }
}

/// The time (ms) below which `side`'s rows have passed the watermark `wm`
/// by `bound`: a left row's time + upper bound < `wm`, a right row's
/// time − lower bound < `wm`. `None` when no row can pass (the side may
/// not be evicted, or the bound does not limit it).
fn cutoff(bound: &Bound, side: usize, may: bool, wm: i64) -> Option<i128> {
    let wm = i128::from(wm);
    let cutoff = match side {
        0 => bound.upper_ms.map(|u| wm - i128::from(u)),
        _ => bound.lower_ms.map(|l| wm + i128::from(l)),
    };
    cutoff.filter(|_| may)
}

/// Where each side's columns are in a state row: a slot per column of the
/// left side, in order, and each right column in the first slot of its
/// type that no earlier right column took, or a new one.
#[derive(Debug, PartialEq)]
pub(super) struct Slots {
    /// For each side, its columns' places in a state row.
    pub of: [Vec<usize>; 2],
    /// Each slot's type.
    pub types: Vec<DataType>,
}

impl Slots {
    pub fn of(left: &[DataType], right: &[DataType]) -> Slots {
        let mut types: Vec<DataType> = left.to_vec();
        let mut taken = vec![false; types.len()];
        let mut right_slots = Vec::with_capacity(right.len());
        for t in right {
            let free = (0..types.len()).find(|&s| !taken[s] && &types[s] == t);
            let slot = free.unwrap_or_else(|| {
                types.push(t.clone());
                taken.push(false);
                types.len() - 1
            });
            taken[slot] = true;
            right_slots.push(META + slot);
        }
        Slots {
            of: [(META..META + left.len()).collect(), right_slots],
            types,
        }
    }
}

/// A state row's schema for `join` (see the module header), and where
/// each side's columns are in it.
pub(super) fn state_schema(join: &StreamJoin) -> (SchemaRef, Slots) {
    let types = |side: usize| -> Vec<DataType> {
        let schema = join.side_schema(side);
        schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect()
    };
    let slots = Slots::of(&types(0), &types(1));
    let mut fields = vec![
        Field::new("__sluice_side", DataType::UInt8, false),
        Field::new("__sluice_time", TIME, true),
        Field::new("__sluice_id", DataType::UInt64, false),
        Field::new("__sluice_matched", DataType::Boolean, false),
    ];
    for (i, t) in slots.types.iter().enumerate() {
        fields.push(Field::new(format!("c{i}"), t.clone(), true));
    }
    (Arc::new(Schema::new(fields)), slots)
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
    let ms = arrow_cast::cast(a, &TIME).map_err(fail)?;
    debug_assert!(ms.as_primitive_opt::<TimestampMillisecondType>().is_some());
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(lower_ms: Option<i64>, upper_ms: Option<i64>) -> Bound {
        Bound {
            left: 0,
            right: 0,
            lower_ms,
            upper_ms,
        }
    }

    #[test]
    fn a_row_passes_once_its_time_and_bound_fall_behind_the_watermark() {
        // b.t BETWEEN a.t - 5 s AND a.t + 10 s: a left row can match a
        // right row up to 10 s later, a right row a left row up to 5 s
        // later.
        let b = bound(Some(5_000), Some(10_000));
        assert_eq!(cutoff(&b, 0, true, 100_000), Some(90_000));
        assert_eq!(cutoff(&b, 1, true, 100_000), Some(105_000));
        // A side that may not be evicted keeps its rows.
        assert_eq!(cutoff(&b, 0, false, 100_000), None);
        // A bound with no limit on a side keeps that side's rows.
        let open = bound(None, Some(10_000));
        assert_eq!(cutoff(&open, 1, true, 100_000), None);
        // A negative bound: the right row is kept only until wm > t + 3 s.
        let later = bound(Some(-3_000), Some(10_000));
        assert_eq!(cutoff(&later, 1, true, 100_000), Some(97_000));
    }

    #[test]
    fn the_right_sides_columns_share_the_left_sides_slots_of_their_type() {
        use DataType::{Int64, Utf8};
        let ts = TIME;
        // Nexmark's bid ⋈ auction.
        let bid = [Int64, Int64, Int64, Utf8, Utf8, ts.clone(), Utf8];
        let auction = [
            Int64,
            Utf8,
            Utf8,
            Int64,
            Int64,
            ts.clone(),
            ts.clone(),
            Int64,
            Int64,
            Utf8,
        ];
        let slots = Slots::of(&bid, &auction);
        assert_eq!(slots.of[0], (4..11).collect::<Vec<_>>());
        assert_eq!(slots.of[1], [4, 7, 8, 5, 6, 9, 11, 12, 13, 10]);
        assert_eq!(slots.types.len(), 10, "17 columns in 10 slots");
        for side in 0..2 {
            let types = if side == 0 { &bid[..] } else { &auction[..] };
            for (c, &slot) in slots.of[side].iter().enumerate() {
                assert_eq!(slots.types[slot - META], types[c]);
            }
            let distinct: std::collections::HashSet<_> = slots.of[side].iter().collect();
            assert_eq!(distinct.len(), types.len(), "one slot a column");
        }
        // No shared type: a slot per column of each side.
        let apart = Slots::of(&[Int64], &[Utf8, Utf8]);
        assert_eq!(apart.of, [vec![4], vec![5, 6]]);
    }

    #[test]
    fn cutoffs_past_the_range_of_times_are_exact() {
        let b = bound(Some(i64::MAX), Some(i64::MAX));
        assert_eq!(
            cutoff(&b, 0, true, i64::MIN),
            Some(i128::from(i64::MIN) - i128::from(i64::MAX))
        );
        assert_eq!(
            cutoff(&b, 1, true, i64::MAX),
            Some(2 * i128::from(i64::MAX))
        );
    }
}
