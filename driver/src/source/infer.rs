//! The schema of a file input (the file source, or a static table):
//! declared in the spec, or inferred from its first file when the spec says
//! `infer: true` (and, for Parquet, from the file's own schema when none is
//! declared). It is fixed in the checkpoint at submit and never inferred
//! again.

use std::io::Cursor;
use std::sync::Arc;

use arrow_schema::{Schema, SchemaRef};
use sluice_common::spec::{ColumnSpec, CsvOptions, Format, declared_schema};
use sluice_common::storage::{FileMeta, Storage};

use crate::error::DriverError;

/// The most bytes of a jsonl or csv file read to infer its schema.
const SAMPLE_BYTES: u64 = 1 << 20;
/// The most records read to infer a schema.
const SAMPLE_RECORDS: usize = 1000;

/// A file input as the spec describes it.
pub struct Input<'a> {
    /// The spec field, for errors (`source.files`, `tables.cities`).
    pub field: String,
    pub path: &'a str,
    pub format: Format,
    pub schema: &'a Option<Vec<ColumnSpec>>,
    pub csv: CsvOptions,
}

impl Input<'_> {
    fn invalid(&self, field: &str, reason: impl std::fmt::Display) -> DriverError {
        DriverError::Invalid(format!("{}.{field}: {reason}", self.field))
    }
}

/// The schema of `input`, whose files are `files` of `dir`.
pub async fn schema(
    input: &Input<'_>,
    dir: &Storage,
    files: &[FileMeta],
) -> Result<SchemaRef, DriverError> {
    if let Some(columns) = input.schema {
        // Validated with the spec; this cannot fail here.
        return declared_schema(columns)
            .map_err(|(i, r)| input.invalid(&format!("schema[{i}]"), r));
    }
    let Some(first) = files.iter().find(|f| f.size > 0) else {
        return Err(input.invalid(
            if input.format == Format::Parquet {
                "schema"
            } else {
                "infer"
            },
            format!(
                "no file in {} to infer the schema from; add one, or declare `schema`",
                input.path
            ),
        ));
    };
    let schema = infer(input, dir, first).await?;
    if schema.fields().is_empty() {
        return Err(input.invalid(
            "infer",
            format!("no columns found in {}", dir.describe_str(&first.path)),
        ));
    }
    Ok(Arc::new(schema))
}

async fn infer(input: &Input<'_>, dir: &Storage, file: &FileMeta) -> Result<Schema, DriverError> {
    let name = dir.describe_str(&file.path);
    let cannot = |e: &dyn std::fmt::Display| {
        input.invalid("infer", format!("cannot infer a schema from {name}: {e}"))
    };
    match input.format {
        Format::Parquet => {
            let meta = sluice_common::parquet_meta::read(dir, &file.path, file.size).await?;
            let m = meta.file_metadata();
            parquet::arrow::parquet_to_arrow_schema(m.schema_descr(), m.key_value_metadata())
                .map_err(|e| cannot(&e))
        }
        Format::Jsonl | Format::Csv => {
            let sample = dir
                .get_range(&file.path, 0..file.size.min(SAMPLE_BYTES))
                .await?;
            // Whole lines only: a sample cut mid-record would not parse.
            let whole = if file.size > SAMPLE_BYTES {
                let end = sample
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                sample.slice(..end)
            } else {
                sample
            };
            if input.format == Format::Jsonl {
                arrow_json::reader::infer_json_schema(Cursor::new(whole), Some(SAMPLE_RECORDS))
                    .map(|(s, _)| s)
                    .map_err(|e| cannot(&e))
            } else {
                arrow_csv::reader::Format::default()
                    .with_header(input.csv.header)
                    .with_delimiter(input.csv.delimiter_byte())
                    .infer_schema(Cursor::new(whole), Some(SAMPLE_RECORDS))
                    .map(|(s, _)| s)
                    .map_err(|e| cannot(&e))
            }
        }
    }
}
