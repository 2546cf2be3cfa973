//! The `value` column of a sink file, in any of the sink's formats (by its
//! extension): jsonl, csv (with a header) or Parquet.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;

/// The values of `value` in a file named `name`, or why they cannot be read.
pub fn values(name: &str, bytes: Bytes) -> Result<Vec<u64>, String> {
    match name.rsplit('.').next() {
        Some("csv") => csv(bytes),
        Some("parquet") => parquet(bytes),
        _ => jsonl(&bytes),
    }
}

#[derive(serde::Deserialize)]
struct Row {
    value: u64,
}

fn jsonl(bytes: &[u8]) -> Result<Vec<u64>, String> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice::<Row>(l)
                .map(|r| r.value)
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn csv(bytes: Bytes) -> Result<Vec<u64>, String> {
    let header = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let names: Vec<String> = String::from_utf8_lossy(header)
        .trim_end()
        .split(',')
        .map(|n| n.trim_matches('"').to_string())
        .collect();
    if !names.iter().any(|n| n == "value") {
        return Err("no column `value` in the header".into());
    }
    // Every column as text; only `value` is parsed.
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let reader = arrow_csv::ReaderBuilder::new(schema)
        .with_header(true)
        .build(std::io::Cursor::new(bytes))
        .map_err(|e| e.to_string())?;
    collect(reader)
}

fn parquet(bytes: Bytes) -> Result<Vec<u64>, String> {
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| e.to_string())?;
    collect(reader)
}

/// The `value` of every row the batches hold.
fn collect(
    batches: impl Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>>,
) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for batch in batches {
        let batch = batch.map_err(|e| e.to_string())?;
        for v in column(&batch)?.iter() {
            out.push(v.ok_or("a null value")?);
        }
    }
    Ok(out)
}

/// The batch's `value` column as UInt64.
fn column(batch: &RecordBatch) -> Result<arrow_array::UInt64Array, String> {
    let c = batch.column_by_name("value").ok_or("no column `value`")?;
    let c = arrow_cast::cast(c, &DataType::UInt64).map_err(|e| e.to_string())?;
    if c.null_count() > 0 {
        return Err("`value` has nulls or is not an unsigned integer".into());
    }
    Ok(c.as_primitive::<UInt64Type>().clone())
}
