//! How Sluice writes Parquet: zstd, row groups of [`ROW_GROUP_ROWS`],
//! dictionaries for text and delta encoding for integers and times. The
//! file sink's tasks and the Delta sink's compaction write with these
//! settings.

use arrow_schema::{DataType, Schema};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

/// Rows per row group: bounded memory per open file, and ranges a reader
/// can split on.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// The writer settings of files of `schema`.
pub fn writer_properties(schema: &Schema) -> WriterProperties {
    // Dictionaries pay off for text, where values repeat. Integers (ids,
    // times, counts) are delta-encoded, which is small when they move
    // slowly and leaves zstd little to do; a dictionary of distinct
    // numbers would only fill to be thrown away.
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
    props.build()
}
