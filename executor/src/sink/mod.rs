//! Sinks on the executor: each kind is one [`SinkWriter`], chosen once
//! per task by [`writer`] from the task's `TaskSink`. A writer has two
//! halves, joined by a channel of [`Piece`]s (see `crate::output`): its
//! [`Encode`] turns output batches into pieces on the blocking side, and
//! [`SinkWriter::write`] writes them into the sink on the task, returning
//! the report of its kind.
//!
//! A new sink kind adds its spec and proto message, one module here with
//! its writer, registered in [`writer`], and its module on the driver.
//!
//! The file sink's formats: an encoder turns a task's output batches into
//! the bytes of one file (the file itself, a hidden temporary name, then
//! create-only into place, is `sluice_common::sink`'s). A new format adds
//! its name to the spec and one encoder module here, named in [`encoder`].

mod csv;
pub mod discard;
pub mod files;
mod hive;
mod jsonl;
pub mod kafka;
mod parquet;
pub mod parts;
pub mod table;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_proto::{SinkFormat, TaskSink, task_output, task_sink};
use tokio::sync::mpsc;

use crate::cache::Caches;
use crate::error::ExecutorError;
pub use parts::Piece;

/// What a sink's encoder knows of its task.
#[derive(Debug, Clone, Copy)]
pub struct TaskOut {
    pub batch: u64,
    pub partition: u32,
}

/// One sink kind on the executor, chosen for one task (see [`writer`]): its
/// two halves may share what they need of each other through it.
pub trait SinkWriter: Send + Sync {
    /// Refuses, before the task reads anything, a sink it cannot write for
    /// input of `schema` (a format this executor does not know).
    fn check(&self, _schema: &SchemaRef) -> Result<(), ExecutorError> {
        Ok(())
    }

    /// The blocking half: the encoder of output rows of `schema` into
    /// pieces; output the sink cannot take is refused before any row.
    fn encoder(&self, task: TaskOut, schema: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError>;

    /// The task's half: writes the pieces the channel brings into the sink
    /// (opened through `caches`) for the task of `partition`; returns what
    /// was written once the channel closes.
    fn write<'a>(
        &'a self,
        caches: &'a Arc<Caches>,
        partition: u32,
        rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>>;
}

/// A sink's blocking half: output batches into pieces.
pub trait Encode: Send {
    /// The pieces of one output batch, appended to `out`; returns the bytes
    /// they hold that count toward the task's output cap.
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<Piece>) -> Result<u64, ExecutorError>;
    /// The last pieces, once every batch is written.
    fn finish(self: Box<Self>, out: &mut Vec<Piece>) -> Result<(), ExecutorError>;
}

/// What a writer saw once the channel closed.
pub enum Written {
    /// Every piece that began was finished: the sink's report (none when
    /// no piece came).
    Done(Option<task_output::Sink>),
    /// The emitter stopped in the middle of this file (or the records).
    Unfinished(Arc<str>),
}

/// The registry of sink kinds: the one place that matches on a task's
/// sink. An error says what is missing.
pub fn writer(sink: &TaskSink) -> Result<Arc<dyn SinkWriter>, String> {
    match &sink.kind {
        Some(task_sink::Kind::Files(f)) => Ok(Arc::new(files::FilesWriter::new(f)?)),
        Some(task_sink::Kind::Kafka(k)) => Ok(Arc::new(kafka::KafkaWriter(k.clone()))),
        Some(task_sink::Kind::Discard(_)) => Ok(Arc::new(discard::Discard::default())),
        Some(task_sink::Kind::Delta(d)) => Ok(Arc::new(table::TableWriter::delta(d)?)),
        Some(task_sink::Kind::Iceberg(i)) => Ok(Arc::new(table::TableWriter::iceberg(i)?)),
        None => Err("missing sink".into()),
    }
}

/// The directory the task's sink writes files into, if it writes files.
pub fn files_path(sink: &TaskSink) -> Option<&str> {
    match &sink.kind {
        Some(task_sink::Kind::Files(f)) if !f.path.is_empty() => Some(&f.path),
        Some(task_sink::Kind::Delta(d)) if !d.path.is_empty() => Some(&d.path),
        Some(task_sink::Kind::Iceberg(i)) if !i.path.is_empty() => Some(&i.path),
        _ => None,
    }
}

/// Encodes batches into one file's bytes. The bytes are a pure function of
/// the batches, so a retried task writes an identical file.
pub trait Encoder: Send {
    /// The bytes that follow the ones already produced, for `batch`.
    fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ExecutorError>;
    /// Bytes held inside the encoder, not produced yet (an unfinished
    /// Parquet row group, estimated): they count toward the file size limit.
    fn buffered(&self) -> u64 {
        0
    }
    /// The last bytes of the file (a footer, for formats that have one).
    fn finish(self: Box<Self>) -> Result<Vec<u8>, ExecutorError>;
}

/// The encoder of `format` for batches of `schema`.
pub fn encoder(format: SinkFormat, schema: SchemaRef) -> Result<Box<dyn Encoder>, ExecutorError> {
    match format {
        SinkFormat::Jsonl => Ok(Box::new(jsonl::Jsonl)),
        SinkFormat::Csv => Ok(Box::<csv::Csv>::default()),
        SinkFormat::Parquet => Ok(Box::new(parquet::Parquet::new(schema)?)),
        SinkFormat::Unspecified => Err(ExecutorError::MalformedTask(
            "sink format unspecified (a driver of another version?)".into(),
        )),
    }
}

/// The file name extension of `format`.
pub fn extension(format: SinkFormat) -> &'static str {
    match format {
        SinkFormat::Jsonl | SinkFormat::Unspecified => "jsonl",
        SinkFormat::Csv => "csv",
        SinkFormat::Parquet => "parquet",
    }
}

#[cfg(test)]
mod tests;
