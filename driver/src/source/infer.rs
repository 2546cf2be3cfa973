//! The schema of a new file source: declared in the spec, or inferred from
//! the first file in the directory when the spec says `infer: true` (and,
//! for Parquet, from the file's own schema when none is declared). It is
//! fixed in `sources/schema` at submit and never inferred again.

use std::io::Cursor;
use std::sync::Arc;

use arrow_schema::{Schema, SchemaRef};
use sluice_common::spec::{FileSourceSpec, Format, declared_schema};
use sluice_common::storage::{FileMeta, Storage, check_input_dir};

use crate::error::DriverError;

/// The most bytes of a jsonl or csv file read to infer its schema.
const SAMPLE_BYTES: u64 = 1 << 20;
/// The most records read to infer a schema.
const SAMPLE_RECORDS: usize = 1000;

fn invalid(field: &str, reason: impl std::fmt::Display) -> DriverError {
    DriverError::Invalid(format!("source.files.{field}: {reason}"))
}

/// The `input` schema of a new query reading `spec`.
pub async fn source_schema(spec: &FileSourceSpec) -> Result<SchemaRef, DriverError> {
    check_input_dir(&spec.path).map_err(|r| invalid("path", r))?;
    if let Some(columns) = &spec.schema {
        // Validated with the spec; this cannot fail here.
        return declared_schema(columns).map_err(|(i, r)| invalid(&format!("schema[{i}]"), r));
    }
    let dir = Storage::open(&spec.path)?;
    let files = dir.list_inputs().await?;
    let Some(first) = files.iter().find(|f| f.size > 0) else {
        return Err(invalid(
            if spec.format == Format::Parquet {
                "schema"
            } else {
                "infer"
            },
            format!(
                "no file in {} to infer the schema from; add one, or declare `schema`",
                spec.path
            ),
        ));
    };
    let schema = infer(&dir, first, spec).await?;
    if schema.fields().is_empty() {
        return Err(invalid(
            "infer",
            format!("no columns found in {}", dir.describe_str(&first.path)),
        ));
    }
    Ok(Arc::new(schema))
}

async fn infer(
    dir: &Storage,
    file: &FileMeta,
    spec: &FileSourceSpec,
) -> Result<Schema, DriverError> {
    let name = dir.describe_str(&file.path);
    let cannot = |e: &dyn std::fmt::Display| {
        invalid("infer", format!("cannot infer a schema from {name}: {e}"))
    };
    match spec.format {
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
            if spec.format == Format::Jsonl {
                arrow_json::reader::infer_json_schema(Cursor::new(whole), Some(SAMPLE_RECORDS))
                    .map(|(s, _)| s)
                    .map_err(|e| cannot(&e))
            } else {
                let csv = spec.csv();
                arrow_csv::reader::Format::default()
                    .with_header(csv.header)
                    .with_delimiter(csv.delimiter_byte())
                    .infer_schema(Cursor::new(whole), Some(SAMPLE_RECORDS))
                    .map(|(s, _)| s)
                    .map_err(|e| cannot(&e))
            }
        }
    }
}
