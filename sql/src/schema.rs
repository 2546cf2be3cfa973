//! A schema on the wire: an Arrow IPC message whose header is the schema.

use std::sync::Arc;

use arrow_ipc::convert::try_schema_from_flatbuffer_bytes;
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
use arrow_schema::{Schema, SchemaRef};

use crate::SqlError;

/// `schema` as an Arrow IPC schema message.
pub fn encode_schema(schema: &Schema) -> Vec<u8> {
    let encoded = IpcDataGenerator::default().schema_to_bytes_with_dictionary_tracker(
        schema,
        &mut DictionaryTracker::new(false),
        &IpcWriteOptions::default(),
    );
    encoded.ipc_message
}

/// The schema of an Arrow IPC schema message.
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef, SqlError> {
    try_schema_from_flatbuffer_bytes(bytes)
        .map(Arc::new)
        .map_err(|e| SqlError::Invalid(format!("the input schema cannot be decoded: {e}")))
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, TimeUnit};

    use super::*;

    #[test]
    fn a_schema_survives_the_wire() {
        let schema = Schema::new(vec![
            Field::new("value", DataType::Int64, false),
            Field::new(
                "timestamp_ms",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
            Field::new("city", DataType::Utf8, true),
        ]);
        let back = decode_schema(&encode_schema(&schema)).unwrap();
        assert_eq!(back.as_ref(), &schema);
        assert!(decode_schema(b"junk").is_err());
    }
}
