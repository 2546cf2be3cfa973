//! Parquet ranges: the row groups whose middle byte lies in the range
//! (so each row group is read by exactly one range), read through storage
//! a row group at a time and conformed to the `input` schema by column
//! name. Only the columns the query reads are fetched and decoded (a
//! projection mask of the file's columns of those names).

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use parquet::arrow::arrow_reader::{
    ArrowPredicate, ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, RowFilter,
};
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
    /// Rows the query's filter dropped.
    pub rows_filtered: Counter,
}

/// What a read returns: the columns of `schema`, of the rows `filter`
/// keeps.
pub struct Read {
    pub schema: SchemaRef,
    pub filter: Option<sluice_sql::RowFilter>,
    pub skip_bad: bool,
}

/// The range's row groups, as batches of the columns read.
pub async fn read(
    storage: Storage,
    r: FileRange,
    read: Read,
    counters: Counters,
    label: &str,
) -> Result<Batches, ExecutorError> {
    let name = format!("{label} {}", storage.describe_str(&r.path));
    let meta = sluice_common::parquet_meta::read(&storage, &r.path, r.size).await?;
    let arrow = ArrowReaderMetadata::try_new(meta.clone(), ArrowReaderOptions::new())
        .map_err(|e| ExecutorError::BadInput(format!("{name}: {e}")))?;
    let selected = row_groups(&meta, r.start, r.end);
    let plan = Arc::new(Plan {
        mask: mask(&arrow, &read.schema),
        arrow,
        schema: read.schema,
        filter: read.filter,
        name,
    });
    let reader = Reader {
        storage,
        path: r.path,
        meta,
        bytes_read: counters.bytes_read,
    };
    let (bad_records, filtered, skip_bad) =
        (counters.bad_records, counters.rows_filtered, read.skip_bad);
    let stream = futures::stream::iter(selected)
        .then(move |i| {
            let (reader, plan) = (reader.clone(), plan.clone());
            let (bad_records, filtered) = (bad_records.clone(), filtered.clone());
            async move {
                let rows = reader.meta.row_group(i).num_rows() as u64;
                match row_group(reader, &plan, i).await {
                    Ok(b) => {
                        let kept: u64 = b.iter().map(|b| b.num_rows() as u64).sum();
                        filtered.add(rows - kept);
                        Ok(b)
                    }
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

/// How each row group of a file is read.
struct Plan {
    arrow: ArrowReaderMetadata,
    /// The file's columns read.
    mask: ProjectionMask,
    /// The columns read, as the query has them.
    schema: SchemaRef,
    filter: Option<sluice_sql::RowFilter>,
    /// The file, in errors.
    name: String,
}

/// The query's filter as the Parquet reader's: each conjunct over its own
/// columns, in order, so that the next conjunct and the columns read are
/// decoded only for the rows kept. A conjunct over a column the file
/// lacks is left to the query.
fn row_filter(arrow: &ArrowReaderMetadata, filter: &sluice_sql::RowFilter) -> Option<RowFilter> {
    let file = arrow.schema();
    let predicates: Vec<Box<dyn ArrowPredicate>> = filter
        .conjuncts()
        .iter()
        .filter_map(|c| {
            let roots = c
                .columns()
                .iter()
                .map(|name| file.index_of(name).ok())
                .collect::<Option<Vec<_>>>()?;
            let mask = ProjectionMask::roots(arrow.parquet_schema(), roots);
            let conjunct = c.clone();
            let keep = move |batch: RecordBatch| {
                // A conjunct that cannot say keeps every row: the query decides.
                Ok(conjunct
                    .keeps(&batch)
                    .unwrap_or_else(|| BooleanArray::from(vec![true; batch.num_rows()])))
            };
            Some(Box::new(ArrowPredicateFn::new(mask, keep)) as Box<dyn ArrowPredicate>)
        })
        .collect();
    (!predicates.is_empty()).then(|| RowFilter::new(predicates))
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
    plan: &Plan,
    i: usize,
) -> Result<Vec<RecordBatch>, ExecutorError> {
    let name = &plan.name;
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
    let mut builder =
        ParquetRecordBatchStreamBuilder::new_with_metadata(reader, plan.arrow.clone())
            .with_row_groups(vec![i])
            .with_projection(plan.mask.clone())
            .with_batch_size(GROUP_LINES);
    if let Some(filter) = plan
        .filter
        .as_ref()
        .and_then(|f| row_filter(&plan.arrow, f))
    {
        builder = builder.with_row_filter(filter);
    }
    let batches: Vec<RecordBatch> = builder
        .build()
        .map_err(failed)?
        .try_collect()
        .await
        .map_err(failed)?;
    batches
        .into_iter()
        .map(|b| conform(b, &plan.schema).map_err(|e| bad(&e)))
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
