//! CSV with a header line, written by arrow-csv (RFC 4180 quoting;
//! timestamps in RFC 3339).

use arrow_array::RecordBatch;

use super::Encoder;
use crate::error::ExecutorError;

#[derive(Default)]
pub struct Csv {
    header_written: bool,
}

impl Encoder for Csv {
    fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ExecutorError> {
        let mut out = Vec::with_capacity(batch.num_rows() * 32);
        let mut w = arrow_csv::WriterBuilder::new()
            .with_header(!self.header_written)
            .build(&mut out);
        w.write(batch)
            .map_err(|e| sluice_common::Error::Encoding(format!("csv: {e}")))?;
        drop(w);
        self.header_written = true;
        Ok(out)
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, ExecutorError> {
        Ok(Vec::new())
    }
}
