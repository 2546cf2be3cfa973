//! State rows as (key, value) byte pairs, the form the local store keeps,
//! and back. Both halves are Arrow's row format: the key is the key
//! columns, whose encoding sorts as the values do (so the store's order
//! is the keys' order, whatever the history that built it), and the value
//! is the other columns.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{ArrowError, SchemaRef};

use crate::error::ExecutorError;

/// The one key of a state without key columns (a global aggregate): the
/// local store takes no empty key.
const GLOBAL: &[u8] = &[0];

fn fail(e: ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("state rows: {e}"))
}

/// Encodes and decodes the rows of one state schema.
#[derive(Debug)]
pub struct RowCodec {
    schema: SchemaRef,
    keys: usize,
    key: Option<RowConverter>,
    value: Option<RowConverter>,
}

/// The encoded keys of a batch's rows.
pub enum KeyRows {
    /// Every row has the one key of a global aggregate.
    Global(usize),
    Rows(Rows),
}

impl KeyRows {
    pub fn len(&self) -> usize {
        match self {
            KeyRows::Global(n) => *n,
            KeyRows::Rows(r) => r.num_rows(),
        }
    }

    pub fn get(&self, i: usize) -> &[u8] {
        match self {
            KeyRows::Global(_) => GLOBAL,
            KeyRows::Rows(r) => r.row(i).data(),
        }
    }
}

fn converter(
    schema: &SchemaRef,
    columns: std::ops::Range<usize>,
) -> Result<Option<RowConverter>, ExecutorError> {
    if columns.is_empty() {
        return Ok(None);
    }
    let fields = schema.fields()[columns]
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    RowConverter::new(fields).map(Some).map_err(fail)
}

impl RowCodec {
    /// The codec of state rows of `schema` keyed by its first `keys` columns.
    pub fn new(schema: SchemaRef, keys: usize) -> Result<Self, ExecutorError> {
        let width = schema.fields().len();
        Ok(RowCodec {
            key: converter(&schema, 0..keys)?,
            value: converter(&schema, keys..width)?,
            schema,
            keys,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn keys(&self) -> usize {
        self.keys
    }

    /// The keys of `batch`, whose leading columns are a state key.
    pub fn key_rows(&self, batch: &RecordBatch) -> Result<KeyRows, ExecutorError> {
        match &self.key {
            None => Ok(KeyRows::Global(batch.num_rows())),
            Some(c) => c
                .convert_columns(&batch.columns()[..self.keys])
                .map(KeyRows::Rows)
                .map_err(fail),
        }
    }

    /// The bytes every key whose first columns hold `leading` (one value
    /// each, at most the key's columns) begins with: a row of the format
    /// is its columns' encodings one after the other, so those of the
    /// leading columns alone are its prefix.
    pub fn key_prefix(&self, leading: &[ArrayRef]) -> Result<Vec<u8>, ExecutorError> {
        if leading.len() > self.keys || leading.iter().any(|c| c.len() != 1) {
            return Err(ExecutorError::TaskPanicked(format!(
                "a key prefix of {} columns (one value each) for a key of {}",
                leading.len(),
                self.keys
            )));
        }
        if leading.is_empty() {
            return Ok(Vec::new());
        }
        let prefix = converter(&self.schema, 0..leading.len())?.expect("columns to convert");
        let rows = prefix.convert_columns(leading).map_err(fail)?;
        Ok(rows.row(0).data().to_vec())
    }

    /// The values of `batch` (state rows); `None` without value columns
    /// (every value is empty).
    pub fn value_rows(&self, batch: &RecordBatch) -> Result<Option<Rows>, ExecutorError> {
        match &self.value {
            None => Ok(None),
            Some(c) => c
                .convert_columns(&batch.columns()[self.keys..])
                .map(Some)
                .map_err(fail),
        }
    }

    /// State rows from (key, value) pairs this codec encoded, in order.
    pub fn decode<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        pairs: &[(K, V)],
    ) -> Result<RecordBatch, ExecutorError> {
        let mut columns = self.decode_keys(pairs)?;
        if let Some(c) = &self.value {
            let parser = c.parser();
            let rows = pairs.iter().map(|(_, v)| parser.parse(v.as_ref()));
            let values = c.convert_rows(rows).map_err(fail)?;
            columns.extend(self.as_schema(values, self.keys)?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(pairs.len()));
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options).map_err(fail)
    }

    /// The key columns of (key, value) pairs this codec encoded, in
    /// order; their values are not read.
    pub fn decode_keys<K: AsRef<[u8]>, V>(
        &self,
        pairs: &[(K, V)],
    ) -> Result<Vec<ArrayRef>, ExecutorError> {
        let Some(c) = &self.key else {
            return Ok(Vec::new());
        };
        let parser = c.parser();
        let rows = pairs.iter().map(|(k, _)| parser.parse(k.as_ref()));
        self.as_schema(c.convert_rows(rows).map_err(fail)?, 0)
    }

    /// Decoded columns as the schema's, from its column `first` on: the
    /// row format gives back a dictionary's values, which are cast to the
    /// schema's own types again.
    fn as_schema(
        &self,
        columns: Vec<ArrayRef>,
        first: usize,
    ) -> Result<Vec<ArrayRef>, ExecutorError> {
        columns
            .into_iter()
            .zip(&self.schema.fields()[first..])
            .map(|(c, f)| match c.data_type() == f.data_type() {
                true => Ok(c),
                false => arrow_cast::cast(&c, f.data_type()).map_err(fail),
            })
            .collect()
    }
}
