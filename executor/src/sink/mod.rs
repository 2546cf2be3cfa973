//! Sink formats on the executor: an encoder turns a task's output batches
//! into the bytes of one file. The file itself (a hidden temporary name,
//! then create-only into place) is `sluice_common::sink`'s.
//!
//! A new format adds its name to the spec and one encoder module here,
//! named in [`encoder`]. The Kafka sink writes records, not files: its
//! rows and their delivery are [`kafka`]'s.

mod csv;
mod hive;
mod jsonl;
pub mod kafka;
mod parquet;
pub mod parts;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use sluice_proto::SinkFormat;

use crate::error::ExecutorError;

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
