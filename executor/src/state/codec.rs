//! Rows as bytes: an Arrow IPC stream, the one format of shuffle buckets,
//! state deltas and snapshots. Encoding is deterministic (no compression,
//! no timestamps), so a retried task writes the same bytes.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::SchemaRef;
use bytes::Bytes;

use crate::error::ExecutorError;

/// `batches` as one IPC stream with `schema`.
pub fn encode(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Bytes, ExecutorError> {
    encode_each(schema, batches.iter().map(|b| Ok(b.clone())))
}

/// The batches `batches` yields as one IPC stream with `schema`, each
/// encoded as it comes.
pub fn encode_each(
    schema: &SchemaRef,
    batches: impl IntoIterator<Item = Result<RecordBatch, ExecutorError>>,
) -> Result<Bytes, ExecutorError> {
    let fail =
        |e: arrow_schema::ArrowError| ExecutorError::TaskPanicked(format!("ipc encode: {e}"));
    let mut w = StreamWriter::try_new(Vec::new(), schema).map_err(fail)?;
    for b in batches {
        w.write(&b?).map_err(fail)?;
    }
    w.finish().map_err(fail)?;
    Ok(Bytes::from(w.into_inner().map_err(fail)?))
}

/// The batches of one IPC stream; `what` names it in errors. A stream whose
/// schema is not `schema` is damage.
pub fn decode(
    bytes: Bytes,
    schema: &SchemaRef,
    what: &str,
) -> Result<Vec<RecordBatch>, ExecutorError> {
    let corrupt = |reason: String| {
        ExecutorError::Common(sluice_common::Error::Corrupt {
            path: what.to_string(),
            reason,
        })
    };
    let reader = StreamReader::try_new(Cursor::new(bytes), None)
        .map_err(|e| corrupt(format!("not an Arrow IPC stream: {e}")))?;
    if reader.schema().fields() != schema.fields() {
        return Err(corrupt(format!(
            "holds columns {:?}, the query's state has {:?}",
            names(&reader.schema()),
            names(schema)
        )));
    }
    reader
        .map(|b| b.map_err(|e| corrupt(format!("cannot be read: {e}"))))
        .collect()
}

fn names(schema: &SchemaRef) -> Vec<String> {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect()
}
