//! Sources on the executor: each reads one task's range of its input as
//! Arrow record batches, in an order fixed by the range alone.
//!
//! A new source adds its spec and proto message, its planner on the driver
//! (`driver/src/source/`), and one reader module here, named in [`open`].

pub mod files;
mod kafka;
mod nexmark;
mod rate;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::StreamExt;
use futures::stream::BoxStream;
use sluice_common::secrets::Secrets;
use sluice_common::storage::Stores;
use sluice_proto::{TaskSource, task_source};

use crate::counter::Counter;
use crate::error::ExecutorError;

/// One task's input, chunk by chunk. Decoding is CPU work: poll it on a
/// blocking thread.
pub type Batches = BoxStream<'static, Result<RecordBatch, ExecutorError>>;

/// What a reader counts as it reads.
#[derive(Debug, Default, Clone)]
pub struct ReadCounters {
    /// Records skipped as malformed (`on_bad_record: skip`).
    pub bad_records: Counter,
    /// Records of the range that were gone, skipped (a Kafka source with
    /// `fail_on_data_loss: false`).
    pub records_lost: Counter,
    /// Bytes of the source's files fetched for their rows (a file source;
    /// a Parquet footer aside).
    pub bytes_read: Counter,
    /// Rows of the range the reader skipped because the query's filter
    /// drops them ([`SourceReader::filter`]): read, not passed on.
    pub rows_filtered: Counter,
}

/// The reader of one task's range.
pub trait SourceReader: Send {
    /// The schema of every batch it reads: the query's `input` table.
    fn schema(&self) -> SchemaRef;
    /// The number of rows the range holds, when the plan fixes it; the
    /// task checks what it read against it.
    fn planned_rows(&self) -> Option<u64>;
    /// Hands the reader the query's filter on its rows. A reader that can
    /// skips the rows it drops, counting them in `rows_filtered`; the
    /// query filters again, so a reader may also ignore it (the default).
    fn filter(&mut self, _filter: sluice_sql::RowFilter) {}

    /// Reads the range's `columns` (indexes into [`SourceReader::schema`],
    /// ascending, at least one), counting what it skips in `counters`.
    /// Every batch holds exactly those columns: a reader that can, decodes
    /// or makes only them.
    fn read(self: Box<Self>, columns: Columns, counters: ReadCounters) -> Batches;
}

/// The columns a task reads of its source, as indexes into its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns(Vec<usize>);

impl Columns {
    /// Every column of `schema`.
    pub fn all(schema: &SchemaRef) -> Self {
        Columns((0..schema.fields().len()).collect())
    }

    /// `wanted` and `also`, ascending; the first column when that is none
    /// (a plan that reads only rows still reads the task's rows).
    /// Invariant: each is a column of `schema`.
    pub fn of(schema: &SchemaRef, wanted: &[usize], also: Option<usize>) -> Self {
        let mut columns: Vec<usize> = wanted.iter().copied().chain(also).collect();
        columns.sort_unstable();
        columns.dedup();
        if columns.is_empty() {
            columns.push(0);
        }
        let width = schema.fields().len();
        assert!(
            columns.iter().all(|&c| c < width),
            "columns {columns:?} of a schema of {width}"
        );
        Columns(columns)
    }

    pub fn indexes(&self) -> &[usize] {
        &self.0
    }

    /// `schema`, projected to these columns.
    pub fn project(&self, schema: &SchemaRef) -> SchemaRef {
        std::sync::Arc::new(schema.project(&self.0).expect("columns of the schema"))
    }

    /// Whether these are every column of `schema`.
    pub fn are_all(&self, schema: &SchemaRef) -> bool {
        self.0.len() == schema.fields().len()
    }
}

/// `batches`, projected to `columns`: for a reader that makes every
/// column.
pub(crate) fn project(batches: Batches, columns: Columns) -> Batches {
    batches
        .map(move |b| {
            // Invariant: the reader's batches are of its whole schema.
            b.map(|b| b.project(columns.indexes()).expect("a column of the batch"))
        })
        .boxed()
}

/// The reader of `source`, whose table has `schema`, reading through
/// `stores`, with the secrets `secrets` allows. A source that does not
/// make sense (a partition out of range, say) is a malformed task.
pub fn open(
    source: &TaskSource,
    schema: SchemaRef,
    stores: &Stores,
    secrets: &Secrets,
) -> Result<Box<dyn SourceReader>, ExecutorError> {
    match source.kind.as_ref() {
        Some(task_source::Kind::Rate(r)) => Ok(Box::new(rate::RateReader::new(*r)?)),
        Some(task_source::Kind::Files(f)) => Ok(Box::new(files::FilesReader::new(
            f.clone(),
            schema,
            stores.clone(),
        )?)),
        Some(task_source::Kind::Kafka(k)) => {
            let reader = kafka::KafkaReader::new(k.clone(), schema, secrets.clone())?;
            Ok(Box::new(reader))
        }
        Some(task_source::Kind::Nexmark(n)) => Ok(Box::new(nexmark::NexmarkReader::new(n)?)),
        None => Err(ExecutorError::MalformedTask("missing source".into())),
    }
}
