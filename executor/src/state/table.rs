//! One partition's state in memory: state rows (the group key, then the
//! aggregates' intermediate states), at most one per key, in a fixed order.
//!
//! A batch changes the state by one [`Change`]: rows to insert or replace,
//! and keys to remove. Applying a change keeps the rows it does not touch
//! in their order and appends the new ones, so a state rebuilt from a
//! snapshot and deltas holds the same rows in the same order as the state
//! that was kept in memory, and writes the same snapshot bytes.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;

use crate::error::ExecutorError;

/// The column of a delta that marks a removed key.
pub const DELETED: &str = "__sluice_deleted";

/// What one batch did to a partition's state.
#[derive(Debug, Clone)]
pub struct Change {
    /// Rows that insert or replace their key's row.
    pub upserts: RecordBatch,
    /// State rows whose keys leave the state (evicted behind the watermark).
    pub deletes: RecordBatch,
}

/// One partition's state.
#[derive(Debug)]
pub struct StateTable {
    schema: SchemaRef,
    keys: usize,
    converter: RowConverter,
    rows: RecordBatch,
    index: HashMap<Box<[u8]>, u32>,
    /// The index's memory, counted when it is built.
    index_bytes: usize,
    /// The batch whose state this is; `None` before the first batch.
    pub version: Option<u64>,
}

fn fail(e: ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("state: {e}"))
}

impl StateTable {
    /// An empty state with state rows of `schema`, whose first `keys`
    /// columns are the key.
    pub fn new(schema: SchemaRef, keys: usize) -> Result<Self, ExecutorError> {
        let fields = schema.fields()[..keys]
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(StateTable {
            converter: RowConverter::new(fields).map_err(fail)?,
            rows: RecordBatch::new_empty(schema.clone()),
            index: HashMap::new(),
            index_bytes: 0,
            schema,
            keys,
            version: None,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Every state row, in the state's order.
    pub fn rows(&self) -> &RecordBatch {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.num_rows()
    }

    /// The memory the state holds: its rows and its index.
    pub fn bytes(&self) -> usize {
        self.rows.get_array_memory_size() + self.index_bytes
    }

    /// Calls `f` with the index and the key bytes of each row of `batch`
    /// (state rows). Without key columns (a global aggregate) every row
    /// has the one empty key.
    fn each_key(
        &self,
        batch: &RecordBatch,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<(), ExecutorError> {
        if self.keys == 0 {
            (0..batch.num_rows()).for_each(|i| f(i, &[]));
            return Ok(());
        }
        let rows = self
            .converter
            .convert_columns(&batch.columns()[..self.keys])
            .map_err(fail)?;
        rows.iter().enumerate().for_each(|(i, r)| f(i, r.as_ref()));
        Ok(())
    }

    /// The state rows of the keys in `partials`, each once, in the order
    /// the keys first appear there; and how many keys are new.
    pub fn lookup(&self, partials: &[RecordBatch]) -> Result<(RecordBatch, usize), ExecutorError> {
        let mut found: Vec<u32> = Vec::new();
        let mut seen: std::collections::HashSet<Box<[u8]>> = Default::default();
        let mut new = 0usize;
        for b in partials {
            self.each_key(b, |_, key| {
                if seen.insert(key.into()) {
                    match self.index.get(key) {
                        Some(&i) => found.push(i),
                        None => new += 1,
                    }
                }
            })?;
        }
        let taken = arrow_select::take::take_record_batch(&self.rows, &UInt32Array::from(found))
            .map_err(fail)?;
        Ok((taken, new))
    }

    /// Where each row of `batch` (whose leading columns are a state key)
    /// has its key's row in [`Self::rows`]; `None`: the state has no row
    /// of its key.
    pub fn positions(&self, batch: &RecordBatch) -> Result<Vec<Option<u32>>, ExecutorError> {
        let mut at = Vec::with_capacity(batch.num_rows());
        self.each_key(batch, |_, key| at.push(self.index.get(key).copied()))?;
        Ok(at)
    }

    /// Whether each row of `batch` (state rows) has a key the state does
    /// not hold.
    pub fn is_new(&self, batch: &RecordBatch) -> Result<BooleanArray, ExecutorError> {
        let mut new = Vec::with_capacity(batch.num_rows());
        self.each_key(batch, |_, key| {
            new.push(Some(!self.index.contains_key(key)))
        })?;
        Ok(new.into_iter().collect())
    }

    /// Whether each row of `batch` (state rows) has a key that neither the
    /// state nor an earlier row of `batch` has: the first of its key.
    pub fn first_new(&self, batch: &RecordBatch) -> Result<BooleanArray, ExecutorError> {
        let mut seen: std::collections::HashSet<Box<[u8]>> = Default::default();
        let mut first = Vec::with_capacity(batch.num_rows());
        self.each_key(batch, |_, key| {
            first.push(Some(
                !self.index.contains_key(key) && seen.insert(key.into()),
            ));
        })?;
        Ok(first.into_iter().collect())
    }

    /// Applies one batch's change, which makes this state version
    /// `version`: first its upserts (each replaces its key's row, or is
    /// appended), then its deletes. A replay applies the same change the
    /// same way, so it leaves the same rows in the same order.
    pub fn apply(&mut self, change: &Change, version: u64) -> Result<(), ExecutorError> {
        if change.upserts.num_rows() > 0 {
            match self.marks(&change.upserts)? {
                // Only new keys: appended, and the index extended.
                None => {
                    let base = self.rows.num_rows();
                    self.rows = concat_batches(&self.schema, [&self.rows, &change.upserts])
                        .map_err(fail)?;
                    self.index_appended(&change.upserts, base)?;
                }
                Some(replaced) => {
                    let kept = self.filtered(&replaced)?;
                    self.rows =
                        concat_batches(&self.schema, [&kept, &change.upserts]).map_err(fail)?;
                    self.reindex()?;
                }
            }
        }
        if change.deletes.num_rows() > 0
            && let Some(deleted) = self.marks(&change.deletes)?
        {
            self.rows = self.filtered(&deleted)?;
            self.index_removed(&deleted);
        }
        self.version = Some(version);
        Ok(())
    }

    /// Which rows have a key of `keys`; `None` when none has.
    fn marks(&self, keys: &RecordBatch) -> Result<Option<Vec<bool>>, ExecutorError> {
        let mut drop = vec![false; self.rows.num_rows()];
        let mut any = false;
        self.each_key(keys, |_, key| {
            if let Some(&i) = self.index.get(key) {
                drop[i as usize] = true;
                any = true;
            }
        })?;
        Ok(any.then_some(drop))
    }

    /// The state's rows but the marked ones.
    fn filtered(&self, drop: &[bool]) -> Result<RecordBatch, ExecutorError> {
        let keep: BooleanArray = drop.iter().map(|d| Some(!d)).collect();
        arrow_select::filter::filter_record_batch(&self.rows, &keep).map_err(fail)
    }

    /// Extends the index by `appended`, the rows from position `base`.
    fn index_appended(&mut self, appended: &RecordBatch, base: usize) -> Result<(), ExecutorError> {
        let mut index = std::mem::take(&mut self.index);
        let (mut twice, mut bytes) = (false, 0);
        let indexed = self.each_key(appended, |i, key| {
            bytes += key.len() + 24;
            twice |= index.insert(Box::from(key), (base + i) as u32).is_some();
        });
        self.index = index;
        indexed?;
        // Invariant: merging leaves one row per key.
        if twice {
            return Err(ExecutorError::TaskPanicked(
                "state holds two rows for one key".into(),
            ));
        }
        self.index_bytes += bytes;
        Ok(())
    }

    /// Drops the marked rows' keys from the index and moves the others to
    /// their positions once the marked rows are gone.
    fn index_removed(&mut self, drop: &[bool]) {
        let mut before = Vec::with_capacity(drop.len());
        let mut gone = 0u32;
        for &d in drop {
            before.push(gone);
            gone += u32::from(d);
        }
        let mut freed = 0;
        self.index.retain(|key, i| {
            let at = *i as usize;
            if drop[at] {
                freed += key.len() + 24;
                return false;
            }
            *i -= before[at];
            true
        });
        self.index_bytes -= freed;
    }

    /// Replaces every row (a snapshot), which is version `version`.
    pub fn load(&mut self, rows: &[RecordBatch], version: u64) -> Result<(), ExecutorError> {
        self.rows = concat_batches(&self.schema, rows).map_err(fail)?;
        self.reindex()?;
        self.version = Some(version);
        Ok(())
    }

    fn reindex(&mut self) -> Result<(), ExecutorError> {
        let mut index: HashMap<Box<[u8]>, u32> = HashMap::with_capacity(self.rows.num_rows());
        let mut twice = false;
        self.each_key(&self.rows, |i, key| {
            twice |= index.insert(Box::from(key), i as u32).is_some();
        })?;
        // Invariant: merging leaves one row per key.
        if twice {
            return Err(ExecutorError::TaskPanicked(
                "state holds two rows for one key".into(),
            ));
        }
        self.index_bytes = index.keys().map(|k| k.len() + 24).sum();
        self.index = index;
        Ok(())
    }

    /// The schema of a delta: a state row and whether its key was removed.
    pub fn delta_schema(&self) -> SchemaRef {
        let mut fields: Vec<Arc<Field>> = self.schema.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(DELETED, DataType::Boolean, false)));
        Arc::new(Schema::new(fields))
    }

    /// A change as one delta batch: its upserts, then its deletes.
    pub fn to_delta(&self, change: &Change) -> Result<RecordBatch, ExecutorError> {
        let mut parts = Vec::new();
        for (b, deleted) in [(&change.upserts, false), (&change.deletes, true)] {
            let mut columns: Vec<Arc<dyn Array>> = b.columns().to_vec();
            columns.push(Arc::new(BooleanArray::from(vec![deleted; b.num_rows()])));
            parts.push(RecordBatch::try_new(self.delta_schema(), columns).map_err(fail)?);
        }
        concat_batches(&self.delta_schema(), &parts).map_err(fail)
    }

    /// A delta batch back as a change.
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
        let rows =
            RecordBatch::try_new(self.schema.clone(), rows.columns().to_vec()).map_err(fail)?;
        let kept: BooleanArray = flags.iter().map(|f| f.map(|f| !f)).collect();
        let upserts = arrow_select::filter::filter_record_batch(&rows, &kept).map_err(fail)?;
        let deletes = arrow_select::filter::filter_record_batch(&rows, &flags).map_err(fail)?;
        Ok(Change { upserts, deletes })
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
