//! Sink formats on the executor: an encoder turns a task's output batches
//! into the bytes of one file. The file itself (a hidden temporary name,
//! then create-only into place) is `sluice_common::sink`'s.
//!
//! A new format adds its name to the spec and one encoder module here,
//! named in [`encoder`].

mod csv;
mod hive;
mod jsonl;
mod parquet;
pub mod parts;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

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
pub fn encoder(format: &str, schema: SchemaRef) -> Result<Box<dyn Encoder>, ExecutorError> {
    match format {
        "" | "jsonl" => Ok(Box::new(jsonl::Jsonl)),
        "csv" => Ok(Box::<csv::Csv>::default()),
        "parquet" => Ok(Box::new(parquet::Parquet::new(schema)?)),
        other => Err(ExecutorError::MalformedTask(format!(
            "sink format {other:?} is not supported by this executor"
        ))),
    }
}

/// The file name extension of `format`.
pub fn extension(format: &str) -> &str {
    match format {
        "" => "jsonl",
        f => f,
    }
}

#[cfg(test)]
mod tests;
