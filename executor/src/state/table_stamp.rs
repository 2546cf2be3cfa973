//! A stamped state: each stored row carries [`TOUCHED`], the time of the
//! batch that last upserted its key, so that keys idle for a query's
//! `state_ttl_ms` can leave the state.
//!
//! ```text
//!  operator rows (the operator's schema) ─► stored(): + TOUCHED = now ─► store, delta
//!  stored rows (a delta or snapshot read back) ─► stored(): kept as they are
//!  stored rows ─► view(): TOUCHED dropped ─► the operator (find, lookup, scan)
//! ```
//!
//! Invariant: a stamped state's upserts are stamped with the `now` of
//! the batch that applies them ([`StateTable::set_now`], set from the
//! task's work before the batch changes the state), which the driver
//! fixes in the batch's plan; so a re-run batch, and a state rebuilt from
//! the checkpoint, hold the same stamps.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::{StateTable, TOUCHED, fail};
use crate::error::ExecutorError;

/// The stored rows of a stamped state of the operator's rows `schema`.
pub(super) fn stored_schema(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(TOUCHED, DataType::Int64, false)));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

impl StateTable {
    /// The time the next change's upserts are stamped with (a stamped
    /// state; a state without stamps ignores it).
    pub fn set_now(&mut self, now_ms: i64) {
        self.now = Some(now_ms);
    }

    /// State rows as stored: a stamped state's operator rows with the
    /// stamp of now, its stored rows as they are; any rows of a state
    /// without stamps as they are.
    pub(super) fn stored(&self, rows: &RecordBatch) -> Result<RecordBatch, ExecutorError> {
        if !self.stamped {
            return Ok(rows.clone());
        }
        let width = self.schema.fields().len();
        let mut columns = rows.columns().to_vec();
        match columns.len() {
            n if n == width + 1 => {}
            n if n == width => {
                let now = match (self.now, rows.num_rows()) {
                    (Some(now), _) => now,
                    (None, 0) => 0,
                    (None, _) => {
                        return Err(ExecutorError::TaskPanicked(
                            "a stamped state changed without its batch's time".into(),
                        ));
                    }
                };
                columns.push(Arc::new(Int64Array::from_value(now, rows.num_rows())));
            }
            n => {
                return Err(ExecutorError::TaskPanicked(format!(
                    "state rows of {n} columns, where the state's have {width}"
                )));
            }
        }
        RecordBatch::try_new(self.stored_schema().clone(), columns).map_err(fail)
    }

    /// Stored rows as the operator sees them: without the stamp.
    pub fn view(&self, stored: &RecordBatch) -> Result<RecordBatch, ExecutorError> {
        if !self.stamped {
            return Ok(stored.clone());
        }
        let width = self.schema.fields().len();
        let columns = stored.columns()[..width.min(stored.num_columns())].to_vec();
        RecordBatch::try_new(self.schema.clone(), columns).map_err(fail)
    }

    /// Operator rows `rows` with the stamps of `stored`, row for row (the
    /// same rows, stored, in the same order): as stored. A state without
    /// stamps gives `rows` back.
    pub fn with_stamps_of(
        &self,
        rows: RecordBatch,
        stored: &RecordBatch,
    ) -> Result<RecordBatch, ExecutorError> {
        if !self.stamped {
            return Ok(rows);
        }
        if rows.num_rows() != stored.num_rows() || stored.num_columns() == 0 {
            return Err(ExecutorError::TaskPanicked(format!(
                "{} state rows given the stamps of {}",
                rows.num_rows(),
                stored.num_rows()
            )));
        }
        let mut columns = rows.columns().to_vec();
        columns.push(stored.column(stored.num_columns() - 1).clone());
        RecordBatch::try_new(self.stored_schema().clone(), columns).map_err(fail)
    }

    /// The operator's rows of the keys whose last upsert was `ttl_ms` or
    /// more before `now_ms` (stamp + ttl ≤ now): the keys that expire. A
    /// key upserted at `now_ms` never does. This reads and decodes every
    /// row of the partition (a scan), keeping only the expired ones; a
    /// state without stamps has none.
    pub fn expired(&self, ttl_ms: u64, now_ms: i64) -> Result<RecordBatch, ExecutorError> {
        if !self.stamped {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let (ttl, now) = (i128::from(ttl_ms), i128::from(now_ms));
        let mut gone = Vec::new();
        super::blocking(|| {
            self.each_chunk(&[], None, |rows| {
                let stamps = rows
                    .column(rows.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| {
                        ExecutorError::TaskPanicked("a stamp that is not Int64".into())
                    })?;
                let keep: arrow_array::BooleanArray = (0..stamps.len())
                    .map(|i| Some(i128::from(stamps.value(i)) + ttl <= now))
                    .collect();
                let expired = arrow_select::filter::filter_record_batch(&rows, &keep);
                gone.push(self.view(&expired.map_err(fail)?)?);
                Ok(())
            })
        })?;
        arrow_select::concat::concat_batches(&self.schema, &gone).map_err(fail)
    }
}
