//! Parquet, written by the `parquet` crate's Arrow writer with Sluice's
//! settings (`sluice_common::sink::parquet`). Row groups are written out
//! as they fill (bytes leave the encoder as soon as the writer has them),
//! and the footer at the end.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use sluice_common::sink::parquet::writer_properties;

use super::Encoder;
use crate::error::ExecutorError;

pub struct Parquet {
    writer: ArrowWriter<Vec<u8>>,
}

fn failed(e: parquet::errors::ParquetError) -> ExecutorError {
    sluice_common::Error::Encoding(format!("parquet: {e}")).into()
}

impl Parquet {
    pub fn new(schema: SchemaRef) -> Result<Self, ExecutorError> {
        let props = writer_properties(&schema);
        let writer = ArrowWriter::try_new(Vec::new(), schema, Some(props)).map_err(failed)?;
        Ok(Parquet { writer })
    }
}

impl Encoder for Parquet {
    fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ExecutorError> {
        self.writer.write(batch).map_err(failed)?;
        Ok(std::mem::take(self.writer.inner_mut()))
    }

    fn buffered(&self) -> u64 {
        self.writer.in_progress_size() as u64
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, ExecutorError> {
        self.writer.into_inner().map_err(failed)
    }
}
