//! Parquet ranges: the row groups whose middle byte lies in the range
//! (so each row group is read by exactly one range), read through storage
//! a row group at a time and conformed to the `input` schema by column
//! name. Only the columns the query reads are fetched and decoded (a
//! projection mask of the file's columns of those names).

use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use sluice_common::storage::Storage;
use sluice_proto::FileRange;

use super::lines::GROUP_LINES;
use crate::counter::Counter;
use crate::error::ExecutorError;
use crate::source::Batches;

/// The indexes of the row groups whose middle lies in `[start, end)`.
pub fn row_groups(meta: &ParquetMetaData, start: u64, end: u64) -> Vec<usize> {
    meta.row_groups()
        .iter()
        .enumerate()
        .filter(|(_, rg)| (start..end).contains(&middle(rg)))
        .map(|(i, _)| i)
        .collect()
}

fn middle(rg: &RowGroupMetaData) -> u64 {
    let ranges = rg.columns().iter().map(|c| c.byte_range());
    let first = ranges.clone().map(|(s, _)| s).min().unwrap_or(0);
    let len: u64 = ranges.map(|(_, l)| l).sum();
    first + len / 2
}

/// What a read counts.
pub struct Counters {
    /// Rows of row groups skipped as bad.
    pub bad_records: Counter,
    /// Bytes fetched for rows.
    pub bytes_read: Counter,
}

/// The range's row groups, as batches of `schema` (the columns read).
pub async fn read(
    storage: Storage,
    r: FileRange,
    schema: SchemaRef,
    counters: Counters,
    skip_bad: bool,
    label: &str,
) -> Result<Batches, ExecutorError> {
    let name = format!("{label} {}", storage.describe_str(&r.path));
    let meta = sluice_common::parquet_meta::read(&storage, &r.path, r.size).await?;
    let arrow = ArrowReaderMetadata::try_new(meta.clone(), ArrowReaderOptions::new())
        .map_err(|e| ExecutorError::BadInput(format!("{name}: {e}")))?;
    let selected = row_groups(&meta, r.start, r.end);
    let mask = mask(&arrow, &schema);
    let reader = Reader {
        storage,
        path: r.path,
        meta,
        bytes_read: counters.bytes_read,
    };
    let bad_records = counters.bad_records;
    let stream = futures::stream::iter(selected)
        .then(move |i| {
            let (reader, arrow, schema, name) =
                (reader.clone(), arrow.clone(), schema.clone(), name.clone());
            let (bad_records, mask) = (bad_records.clone(), mask.clone());
            async move {
                let rows = reader.meta.row_group(i).num_rows() as u64;
                match row_group(reader, (arrow, mask), i, &schema, &name).await {
                    Ok(b) => Ok(b),
                    Err(e) if skip_bad && matches!(e, ExecutorError::BadInput(_)) => {
                        bad_records.add(rows);
                        Ok(Vec::new())
                    }
                    Err(e) => Err(e),
                }
            }
        })
        .flat_map(|res| match res {
            Ok(batches) => futures::stream::iter(batches.into_iter().map(Ok)).boxed(),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        });
    Ok(stream.boxed())
}

/// The file's top-level columns named in `schema`; a column the file
/// lacks is named by [`conform`]'s error.
fn mask(arrow: &ArrowReaderMetadata, schema: &SchemaRef) -> ProjectionMask {
    let file = arrow.schema();
    let roots = schema
        .fields()
        .iter()
        .filter_map(|f| file.index_of(f.name()).ok());
    ProjectionMask::roots(arrow.parquet_schema(), roots)
}

async fn row_group(
    reader: Reader,
    (arrow, mask): (ArrowReaderMetadata, ProjectionMask),
    i: usize,
    schema: &SchemaRef,
    name: &str,
) -> Result<Vec<RecordBatch>, ExecutorError> {
    let bad =
        |e: &dyn std::fmt::Display| ExecutorError::BadInput(format!("{name} row group {i}: {e}"));
    // A storage error stays one (it may be retried); anything else is bad data.
    let failed = |e: ParquetError| match e {
        ParquetError::External(inner) => match inner.downcast::<sluice_common::Error>() {
            Ok(storage) => ExecutorError::Common(*storage),
            Err(other) => bad(&other),
        },
        other => bad(&other),
    };
    let batches: Vec<RecordBatch> =
        ParquetRecordBatchStreamBuilder::new_with_metadata(reader, arrow)
            .with_row_groups(vec![i])
            .with_projection(mask)
            .with_batch_size(GROUP_LINES)
            .build()
            .map_err(failed)?
            .try_collect()
            .await
            .map_err(failed)?;
    batches
        .into_iter()
        .map(|b| conform(b, schema).map_err(|e| bad(&e)))
        .collect()
}

/// `batch` with the columns of `schema`, found by name and cast to its
/// types.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
    if batch.schema().fields() == schema.fields() {
        return RecordBatch::try_new(schema.clone(), batch.columns().to_vec())
            .map_err(|e| e.to_string());
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let c = batch
                .column_by_name(f.name())
                .ok_or_else(|| format!("no column {:?}, which the schema declares", f.name()))?;
            if c.data_type() == f.data_type() {
                return Ok(c.clone());
            }
            arrow_cast::cast(c, f.data_type()).map_err(|e| {
                format!(
                    "column {:?} is {} in the file and cannot be read as {}: {e}",
                    f.name(),
                    c.data_type(),
                    f.data_type()
                )
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

/// Byte ranges of one Parquet file, through storage.
#[derive(Clone)]
struct Reader {
    storage: Storage,
    path: String,
    meta: Arc<ParquetMetaData>,
    bytes_read: Counter,
}

impl AsyncFileReader for Reader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ParquetError>> {
        async move {
            let bytes = self
                .storage
                .get_range(&self.path, range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))?;
            self.bytes_read.add(bytes.len() as u64);
            Ok(bytes)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>, ParquetError>> {
        let meta = self.meta.clone();
        async move { Ok(meta) }.boxed()
    }
}
