//! A Delta table on the executor: a task's output rows cast to the types
//! the table's data files hold (`sluice_common::sink::delta_table`), then
//! written as the file sink writes Parquet part files, into the table's
//! directory, each name tagged with the query's id. The driver adds them
//! to the table's log.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::sink::delta_table::{file_column, file_schema};
use sluice_proto::{DeltaTaskSink, FilesTaskSink, SinkFormat};
use tokio::sync::mpsc;

use super::files::FilesWriter;
use super::parts::{Parts, Piece};
use super::{Encode, SinkWriter, TaskOut, Written};
use crate::cache::Caches;
use crate::error::ExecutorError;

/// The Delta table a task writes.
pub struct DeltaWriter(FilesWriter);

impl DeltaWriter {
    /// The writer of `sink`; a sink without a path or file tag is refused.
    pub fn new(sink: &DeltaTaskSink) -> Result<Self, String> {
        if sink.file_tag.is_empty() {
            return Err("missing Delta file tag".into());
        }
        let files = FilesTaskSink {
            path: sink.path.clone(),
            format: SinkFormat::Parquet.into(),
            partition_by: sink.partition_by.clone(),
            max_file_bytes: sink.target_file_bytes,
        };
        Ok(DeltaWriter(FilesWriter::tagged(&files, &sink.file_tag)?))
    }
}

fn table_schema(output: &SchemaRef) -> Result<SchemaRef, ExecutorError> {
    Ok(file_schema(output)?)
}

impl SinkWriter for DeltaWriter {
    fn check(&self, schema: &SchemaRef) -> Result<(), ExecutorError> {
        table_schema(schema).map(|_| ())
    }

    fn encoder(&self, task: TaskOut, schema: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError> {
        let files = table_schema(schema)?;
        let parts = Parts::new(self.0.layout(task), &files)?;
        Ok(Box::new(Cast { files, parts }))
    }

    fn write<'a>(
        &'a self,
        caches: &'a Arc<Caches>,
        partition: u32,
        rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>> {
        self.0.write(caches, partition, rx)
    }
}

/// Output batches cast to the data files' schema, then laid out in files.
struct Cast {
    files: SchemaRef,
    parts: Parts,
}

impl Encode for Cast {
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<Piece>) -> Result<u64, ExecutorError> {
        let columns = batch
            .columns()
            .iter()
            .zip(self.files.fields())
            .map(|(c, f)| file_column(c, f.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        let columns = RecordBatch::try_new(self.files.clone(), columns).map_err(|e| {
            ExecutorError::from(sluice_common::Error::Encoding(format!(
                "rows into the Delta table's column types: {e}"
            )))
        })?;
        Encode::write(&mut self.parts, &columns, out)
    }

    fn finish(self: Box<Self>, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        Encode::finish(Box::new(self.parts), out)
    }
}
