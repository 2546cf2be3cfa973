//! A table on the executor, Delta Lake or Iceberg: a task's output rows
//! cast to the types the table's data files hold
//! (`sluice_common::sink::delta_table`, `sluice_common::sink::iceberg`),
//! then written as the file sink writes Parquet part files, into the
//! table's data directory, each name tagged with the query's id. The
//! driver commits them to the table.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::sink::delta_table::{self, file_column};
use sluice_common::sink::iceberg::schema::{self as iceberg, Column};
use sluice_proto::{DeltaTaskSink, FilesTaskSink, IcebergTaskSink, SinkFormat};
use tokio::sync::mpsc;

use super::files::FilesWriter;
use super::parts::{Parts, Piece};
use super::{Encode, SinkWriter, TaskOut, Written};
use crate::cache::Caches;
use crate::error::ExecutorError;

/// The table a task writes.
pub struct TableWriter {
    files: FilesWriter,
    format: Format,
}

/// The table's format, which sets its data files' schema.
enum Format {
    Delta,
    /// An Iceberg table with these columns.
    Iceberg(Vec<Column>),
}

impl TableWriter {
    /// The writer of a Delta `sink`; a sink without a file tag is refused.
    pub fn delta(sink: &DeltaTaskSink) -> Result<Self, String> {
        Self::files(
            &sink.path,
            &sink.partition_by,
            sink.target_file_bytes,
            &sink.file_tag,
        )
        .map(|files| TableWriter {
            files,
            format: Format::Delta,
        })
    }

    /// The writer of an Iceberg `sink`; a sink without a path, columns or
    /// file tag is refused.
    pub fn iceberg(sink: &IcebergTaskSink) -> Result<Self, String> {
        if sink.path.is_empty() || sink.columns.is_empty() {
            return Err("missing Iceberg data path or columns".into());
        }
        let columns = sink
            .columns
            .iter()
            .map(|c| Column {
                id: c.id,
                name: c.name.clone(),
                required: c.required,
                type_name: c.r#type.clone(),
            })
            .collect();
        Self::files(&sink.path, &[], sink.target_file_bytes, &sink.file_tag).map(|files| {
            TableWriter {
                files,
                format: Format::Iceberg(columns),
            }
        })
    }

    fn files(
        path: &str,
        partition_by: &[String],
        target: u64,
        tag: &str,
    ) -> Result<FilesWriter, String> {
        if tag.is_empty() {
            return Err("missing table file tag".into());
        }
        let files = FilesTaskSink {
            path: path.to_string(),
            format: SinkFormat::Parquet.into(),
            partition_by: partition_by.to_vec(),
            max_file_bytes: target,
        };
        FilesWriter::tagged(&files, tag)
    }

    fn table_schema(&self, output: &SchemaRef) -> Result<SchemaRef, ExecutorError> {
        Ok(match &self.format {
            Format::Delta => delta_table::file_schema(output)?,
            Format::Iceberg(columns) => iceberg::file_schema(columns, output)?,
        })
    }
}

impl SinkWriter for TableWriter {
    /// Delta: the input's types have Delta types. An Iceberg table's
    /// columns are matched with the output, in [`SinkWriter::encoder`].
    fn check(&self, schema: &SchemaRef) -> Result<(), ExecutorError> {
        match self.format {
            Format::Delta => self.table_schema(schema).map(|_| ()),
            Format::Iceberg(_) => Ok(()),
        }
    }

    fn encoder(&self, task: TaskOut, schema: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError> {
        let files = self.table_schema(schema)?;
        let parts = Parts::new(self.files.layout(task), &files)?;
        Ok(Box::new(Cast { files, parts }))
    }

    fn write<'a>(
        &'a self,
        caches: &'a Arc<Caches>,
        partition: u32,
        rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>> {
        self.files.write(caches, partition, rx)
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
                "rows into the table's column types: {e}"
            )))
        })?;
        Encode::write(&mut self.parts, &columns, out)
    }

    fn finish(self: Box<Self>, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        Encode::finish(Box::new(self.parts), out)
    }
}
