//! JSON lines: one object per row, as `arrow_json` writes it.

use arrow_array::RecordBatch;

use super::Encoder;
use crate::error::ExecutorError;

pub struct Jsonl;

impl Encoder for Jsonl {
    fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ExecutorError> {
        Ok(sluice_common::sink::encode_jsonl(std::slice::from_ref(
            batch,
        ))?)
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, ExecutorError> {
        Ok(Vec::new())
    }
}
