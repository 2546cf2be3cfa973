//! A batch's change as a delta file's rows, and back: the stored rows
//! (a stamped state's with their stamps) of its upserts, then of its
//! deletes, each flagged by [`DELETED`].

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;

use super::{Change, DELETED, StateTable, fail};
use crate::error::ExecutorError;

impl StateTable {
    /// The schema of a delta: a stored row and whether its key was removed.
    pub fn delta_schema(&self) -> SchemaRef {
        let mut fields: Vec<Arc<Field>> = self.stored_schema().fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(DELETED, DataType::Boolean, false)));
        Arc::new(Schema::new(fields))
    }

    /// A change as one delta batch: its upserts, then its deletes, as
    /// stored rows (a stamped state's operator rows stamped as
    /// [`StateTable::apply`] stamps them).
    pub fn to_delta(&self, change: &Change) -> Result<RecordBatch, ExecutorError> {
        let mut parts = Vec::new();
        for (b, deleted) in [(&change.upserts, false), (&change.deletes, true)] {
            let b = self.stored(b)?;
            let mut columns: Vec<Arc<dyn Array>> = b.columns().to_vec();
            columns.push(Arc::new(BooleanArray::from(vec![deleted; b.num_rows()])));
            parts.push(RecordBatch::try_new(self.delta_schema(), columns).map_err(fail)?);
        }
        concat_batches(&self.delta_schema(), &parts).map_err(fail)
    }

    /// A delta batch back as a change, of stored rows.
    pub fn read_delta(&self, delta: &[RecordBatch]) -> Result<Change, ExecutorError> {
        let all = concat_batches(&self.delta_schema(), delta).map_err(fail)?;
        let flags = all
            .column(all.num_columns() - 1)
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| ExecutorError::TaskPanicked("delta flag is not boolean".into()))?
            .clone();
        let rows = all
            .project(&(0..all.num_columns() - 1).collect::<Vec<_>>())
            .map_err(fail)?;
        let rows = RecordBatch::try_new(self.stored_schema().clone(), rows.columns().to_vec())
            .map_err(fail)?;
        let kept: BooleanArray = flags.iter().map(|f| f.map(|f| !f)).collect();
        let upserts = arrow_select::filter::filter_record_batch(&rows, &kept).map_err(fail)?;
        let deletes = arrow_select::filter::filter_record_batch(&rows, &flags).map_err(fail)?;
        Ok(Change { upserts, deletes })
    }
}
