//! An aggregation that reads another aggregation's changes (rows, each
//! added or retracted; see `sluice_sql::changes`): its state is the
//! multiset of its input rows, one state row per distinct input row with
//! the number of times it is held. A batch's changes add to and take from
//! those counts, and each group they touch is aggregated again from its
//! rows, so any aggregate (`max`, `count(DISTINCT ..)`) takes a
//! retraction.
//!
//! ```text
//!  changes (row, diff), in shuffle order ─► net diff per distinct row, in first-appearance order
//!  count in state N-1 + net diff ─► > 0: upsert   = 0: delete   < 0: fault
//!  emit: update   ─► the groups of the rows whose count changed, aggregated from state N
//!        complete ─► every group of state N
//! ```
//!
//! Invariant: a count never goes below zero, since a row is retracted
//! only after it was added. A negative count fails the task: the state
//! and its input disagree, and nothing is emitted from them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;
use sluice_sql::Aggregation;

use super::Advanced;
use crate::error::ExecutorError;
use crate::state::table::StateTable;

/// The column of a state row that says how many times its row is held.
pub const COUNT: &str = "__sluice_count";

/// The schema of a state row (an input row, then [`COUNT`]), and how many
/// leading columns are its key (the whole input row).
pub fn state_schema(agg: &Aggregation) -> (SchemaRef, usize) {
    let input = agg.input_rows_schema();
    let mut fields: Vec<Arc<Field>> = input.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(COUNT, DataType::Int64, false)));
    (Arc::new(Schema::new(fields)), input.fields().len())
}

/// Folds a batch's changes (input rows, then their diff) into the counts
/// of `state`. What is pending is the distinct rows whose count changed:
/// their groups are the ones the batch changed.
pub fn advance(state: &StateTable, changes: Vec<RecordBatch>) -> Result<Advanced, ExecutorError> {
    let (schema, keys) = (state.schema().clone(), state.schema().fields().len() - 1);
    let changes: Vec<RecordBatch> = changes.into_iter().filter(|b| b.num_rows() > 0).collect();
    let Some(first) = changes.first() else {
        return Ok(Advanced {
            upserts: RecordBatch::new_empty(schema),
            deletes: None,
            pending: None,
            retracted: None,
            unmatchable: 0,
        });
    };
    let all = concat_batches(&first.schema(), &changes).map_err(fail)?;
    let (distinct, diffs) = net(&all, keys)?;
    let found = state.find(std::slice::from_ref(&distinct))?;
    let at = found.at;
    let counts = found.rows.column(keys).as_primitive::<Int64Type>();
    let (mut touched, mut kept, mut counted, mut gone) = (vec![], vec![], vec![], vec![]);
    for (i, (&diff, at)) in diffs.iter().zip(&at).enumerate() {
        if diff == 0 {
            continue;
        }
        let count = at.map_or(0, |p| counts.value(p as usize)) + diff;
        touched.push(i as u32);
        match count {
            0 => gone.push(i as u32),
            n if n > 0 => {
                kept.push(i as u32);
                counted.push(n);
            }
            n => {
                return Err(ExecutorError::TaskPanicked(format!(
                    "changes: a row of the aggregation's input is retracted {} more time(s) than it was added",
                    -n
                )));
            }
        }
    }
    let rows = |pick: Vec<u32>, counts: Int64Array| -> Result<RecordBatch, ExecutorError> {
        let taken = take_record_batch(&distinct, &UInt32Array::from(pick)).map_err(fail)?;
        let mut columns: Vec<ArrayRef> = taken.columns()[..keys].to_vec();
        columns.push(Arc::new(counts));
        RecordBatch::try_new(schema.clone(), columns).map_err(fail)
    };
    let deleted = Int64Array::from(vec![0; gone.len()]);
    Ok(Advanced {
        upserts: rows(kept, Int64Array::from(counted))?,
        deletes: Some(rows(gone, deleted)?),
        pending: Some(take_record_batch(&distinct, &UInt32Array::from(touched)).map_err(fail)?),
        retracted: None,
        unmatchable: 0,
    })
}

/// The distinct rows of `all` by its first `keys` columns, each at its
/// first appearance, and the sum of the last column (the diff) of each.
fn net(all: &RecordBatch, keys: usize) -> Result<(RecordBatch, Vec<i64>), ExecutorError> {
    let diff = all
        .column(all.num_columns() - 1)
        .as_primitive::<Int64Type>();
    let (mut firsts, mut sums) = (Vec::<u32>::new(), Vec::<i64>::new());
    if keys == 0 {
        // Every row is the one empty row.
        firsts.push(0);
        sums.push(diff.values().iter().sum());
    } else {
        let rows = converter(&all.columns()[..keys])?;
        let mut seen: HashMap<&[u8], usize> = HashMap::with_capacity(all.num_rows());
        for (i, row) in rows.iter().enumerate() {
            let n = *seen.entry(row.data()).or_insert_with(|| {
                firsts.push(i as u32);
                sums.push(0);
                firsts.len() - 1
            });
            sums[n] += diff.value(i);
        }
    }
    let distinct = take_record_batch(all, &UInt32Array::from(firsts)).map_err(fail)?;
    Ok((distinct, sums))
}

/// What a batch's changes left of the groups they touched.
pub struct Groups {
    /// The input rows of the groups that still have rows, each repeated
    /// by its count, in the state's order.
    pub rows: RecordBatch,
    /// One input row of each group left with none.
    pub emptied: Option<RecordBatch>,
}

/// The input rows held in `state` of the groups of `touched` (input
/// rows), or of every group when `None`.
pub fn groups(
    agg: &Aggregation,
    state: &StateTable,
    touched: Option<&RecordBatch>,
) -> Result<Groups, ExecutorError> {
    let rows = &state.scan()?;
    let keys = rows.num_columns() - 1;
    let (selected, emptied) = match touched {
        Some(t) => in_groups(agg, rows, t)?,
        None => (None, None),
    };
    let counts = rows.column(keys).as_primitive::<Int64Type>();
    let mut pick = Vec::new();
    for (i, &n) in counts.values().iter().enumerate() {
        if selected.as_ref().is_none_or(|s| s[i]) {
            pick.extend(std::iter::repeat_n(i as u32, n as usize));
        }
    }
    let input = rows.project(&(0..keys).collect::<Vec<_>>()).map_err(fail)?;
    Ok(Groups {
        rows: take_record_batch(&input, &UInt32Array::from(pick)).map_err(fail)?,
        emptied,
    })
}

/// Whether each of `rows` (state rows) is in a group of `touched`, and
/// one row of `touched` for each of its groups that no row is in; `None`
/// without groups (a global aggregate: every row is in its one group,
/// which is never left without a row).
#[allow(clippy::type_complexity)]
fn in_groups(
    agg: &Aggregation,
    rows: &RecordBatch,
    touched: &RecordBatch,
) -> Result<(Option<Vec<bool>>, Option<RecordBatch>), ExecutorError> {
    let wanted = agg.group_of(touched)?;
    if wanted.is_empty() {
        return Ok((None, None));
    }
    let converter = RowConverter::new(
        wanted
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )
    .map_err(fail)?;
    let wanted = converter.convert_columns(&wanted).map_err(fail)?;
    // Each group of `touched`: its first row, and whether a row holds it.
    let mut firsts: Vec<(u32, bool)> = Vec::new();
    let mut group: HashMap<&[u8], usize> = HashMap::new();
    for (i, r) in wanted.iter().enumerate() {
        group.entry(r.data()).or_insert_with(|| {
            firsts.push((i as u32, false));
            firsts.len() - 1
        });
    }
    let held = converter
        .convert_columns(&agg.group_of(rows)?)
        .map_err(fail)?;
    let mut selected = Vec::with_capacity(rows.num_rows());
    for r in held.iter() {
        let g = group.get(r.data()).copied();
        if let Some(g) = g {
            firsts[g].1 = true;
        }
        selected.push(g.is_some());
    }
    let emptied: Vec<u32> = firsts.iter().filter(|f| !f.1).map(|f| f.0).collect();
    let emptied = take_record_batch(touched, &UInt32Array::from(emptied)).map_err(fail)?;
    Ok((Some(selected), Some(emptied)))
}

fn converter(columns: &[ArrayRef]) -> Result<arrow_row::Rows, ExecutorError> {
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields).map_err(fail)?;
    converter.convert_columns(columns).map_err(fail)
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("changes: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new(COUNT, DataType::Int64, false),
        ]))
    }

    /// Input rows `n` with their diffs.
    fn changes(rows: &[(i64, i64)]) -> RecordBatch {
        let schema = sluice_sql::with_diff(&Arc::new(Schema::new(vec![Field::new(
            "n",
            DataType::Int64,
            true,
        )])));
        let n: Int64Array = rows.iter().map(|r| Some(r.0)).collect();
        let d: Int64Array = rows.iter().map(|r| Some(r.1)).collect();
        RecordBatch::try_new(schema, vec![Arc::new(n), Arc::new(d)]).unwrap()
    }

    /// A state holding each `(n, count)`.
    fn state(held: &[(i64, i64)]) -> StateTable {
        let mut table = crate::state::test_table(state_schema(), 1);
        let n: Int64Array = held.iter().map(|r| Some(r.0)).collect();
        let c: Int64Array = held.iter().map(|r| Some(r.1)).collect();
        let rows = RecordBatch::try_new(state_schema(), vec![Arc::new(n), Arc::new(c)]).unwrap();
        table.load(&[rows], 1).unwrap();
        table
    }

    fn pairs(b: &RecordBatch) -> Vec<(i64, i64)> {
        let n = b.column(0).as_primitive::<Int64Type>();
        let c = b.column(1).as_primitive::<Int64Type>();
        (0..b.num_rows())
            .map(|i| (n.value(i), c.value(i)))
            .collect()
    }

    #[test]
    fn a_batch_nets_its_changes_and_counts_each_row() {
        let held = state(&[(1, 2), (2, 1)]);
        // 1 retracted and added again: no change. 2 retracted: gone. 3
        // added twice, in two batches of one shuffle.
        let batches = vec![
            changes(&[(1, -1), (3, 1), (2, -1)]),
            changes(&[(1, 1), (3, 1)]),
        ];
        let advanced = advance(&held, batches).unwrap();
        assert_eq!(pairs(&advanced.upserts), vec![(3, 2)]);
        let deletes = advanced.deletes.unwrap();
        assert_eq!(pairs(&deletes), vec![(2, 0)]);
        let touched = advanced.pending.unwrap();
        assert_eq!(pairs(&touched), vec![(3, 1), (2, -1)], "first appearances");
    }

    #[test]
    fn a_row_retracted_more_often_than_added_fails_the_task() {
        let held = state(&[(1, 1)]);
        let err = advance(&held, vec![changes(&[(1, -1), (1, -1)])]).unwrap_err();
        assert!(
            err.to_string()
                .contains("retracted 1 more time(s) than it was added"),
            "{err}"
        );
        let err = advance(&held, vec![changes(&[(9, -1)])]).unwrap_err();
        assert!(err.to_string().contains("retracted"), "{err}");
    }

    #[test]
    fn no_changes_change_nothing() {
        let held = state(&[(1, 1)]);
        let advanced = advance(&held, vec![changes(&[])]).unwrap();
        assert_eq!(advanced.upserts.num_rows(), 0);
        assert!(advanced.pending.is_none(), "no group to emit");
    }
}
