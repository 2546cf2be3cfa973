//! Parquet, zstd-compressed, written by the `parquet` crate's Arrow writer.
//! Row groups are written out as they fill (bytes leave the encoder as soon
//! as the writer has them), and the footer at the end.

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::Encoder;
use crate::error::ExecutorError;

/// Rows per row group: bounded memory per open file, and ranges a reader
/// can split on.
const ROW_GROUP_ROWS: usize = 128 * 1024;

pub struct Parquet {
    writer: ArrowWriter<Vec<u8>>,
}

fn failed(e: parquet::errors::ParquetError) -> ExecutorError {
    sluice_common::Error::Encoding(format!("parquet: {e}")).into()
}

impl Parquet {
    pub fn new(schema: SchemaRef) -> Result<Self, ExecutorError> {
        // Dictionaries pay off for text, where values repeat. Integers
        // (ids, times, counts) are delta-encoded, which is small when they
        // move slowly and leaves zstd little to do; a dictionary of
        // distinct numbers would only fill to be thrown away.
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_dictionary_enabled(false);
        for field in schema.fields() {
            let column = ColumnPath::from(field.name().as_str());
            props = match field.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    props.set_column_dictionary_enabled(column, true)
                }
                t if t.is_integer()
                    || matches!(
                        t,
                        DataType::Date32
                            | DataType::Date64
                            | DataType::Timestamp(..)
                            | DataType::Time32(_)
                            | DataType::Time64(_)
                            | DataType::Duration(_)
                    ) =>
                {
                    props.set_column_encoding(column, Encoding::DELTA_BINARY_PACKED)
                }
                _ => props,
            };
        }
        let props = props.build();
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
