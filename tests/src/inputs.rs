//! Input files for file-source tests: a deterministic table of rows,
//! written as jsonl, csv or Parquet files into a source directory the way
//! a producer should (a hidden temporary name, then a rename), and the
//! YAML of a `source.files` spec over them.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use sluice_common::sink::encode_jsonl;

/// The columns of every generated row.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("city", DataType::Utf8, true),
        Field::new("tags", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ]))
}

/// The same columns as a spec's `schema:` list.
pub const SCHEMA_YAML: &str = "      - {name: id, type: bigint}\n      - {name: ts, type: timestamp}\n      - {name: city, type: string}\n      - {name: tags, type: string}\n      - {name: score, type: double}\n";

const CITIES: [&str; 5] = ["Lyon", "Oslo", "Kyiv", "Lima", "Pune"];

/// The rows of file number `file`: `rows` rows with ids from
/// `file * rows`. Every 13th city is null.
pub fn rows(file: u64, rows: u64) -> RecordBatch {
    let ids: Vec<i64> = (file * rows..(file + 1) * rows).map(|i| i as i64).collect();
    let ts: Vec<i64> = ids.iter().map(|i| 1_700_000_000_000 + i * 1_337).collect();
    let city: Vec<Option<&str>> = ids
        .iter()
        .map(|i| (i % 13 != 0).then(|| CITIES[(*i as usize) % CITIES.len()]))
        .collect();
    let tags: Vec<String> = ids
        .iter()
        .map(|i| format!("t{},u{}", i % 3, i % 4))
        .collect();
    let score: Vec<f64> = ids.iter().map(|i| (*i as f64) * 0.37 % 100.0).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(TimestampMillisecondArray::from(ts)),
            Arc::new(StringArray::from(city)),
            Arc::new(StringArray::from(tags)),
            Arc::new(Float64Array::from(score)),
        ],
    )
    .expect("generated rows fit the schema")
}

/// Writes `batch` as `dir/name` in `format`, under a hidden name first so
/// that a source never sees a half-written file.
pub fn write(dir: &Path, name: &str, format: &str, batch: &RecordBatch) {
    let bytes = encode(format, batch);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).expect("input file writes");
    std::fs::rename(&tmp, dir.join(name)).expect("input file renames");
}

/// `batch` as the bytes of a `format` file. Parquet files get row groups
/// of 64 rows, so that one file holds several.
pub fn encode(format: &str, batch: &RecordBatch) -> Vec<u8> {
    match format {
        "jsonl" => encode_jsonl(std::slice::from_ref(batch)).expect("jsonl encodes"),
        "csv" => {
            let mut out = Vec::new();
            let mut w = arrow_csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            w.write(batch).expect("csv encodes");
            drop(w);
            out
        }
        "parquet" => {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(64))
                .build();
            let mut out = Vec::new();
            let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
                .expect("parquet writer");
            w.write(batch).expect("parquet encodes");
            w.close().expect("parquet footer");
            out
        }
        other => panic!("no such format {other}"),
    }
}

/// The YAML of a query reading `dir` in `format` with the declared schema
/// (none for Parquet: the files' own), into jsonl at `sink`.
pub fn spec(
    name: &str,
    dir: &Path,
    format: &str,
    sink: &Path,
    sql: &str,
    total_files: u64,
) -> String {
    let schema = if format == "parquet" {
        String::new()
    } else {
        format!("    schema:\n{SCHEMA_YAML}")
    };
    format!(
        "name: {name}\nsource:\n  files:\n    path: {}\n    format: {format}\n{schema}    max_files_per_batch: 2\n    total_files: {total_files}\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {sql:?}\n",
        dir.display(),
        sink.display(),
    )
}

/// A static table of cities: every city of the generated rows but Pune,
/// and one the rows never name.
pub fn cities() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new("country", DataType::Utf8, true),
        Field::new("pop", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec![
                "Lyon", "Oslo", "Kyiv", "Lima", "Bern",
            ])),
            Arc::new(StringArray::from(vec!["FR", "NO", "UA", "PE", "CH"])),
            Arc::new(Int64Array::from(vec![522, 709, 2952, 10_000, 134])),
        ],
    )
    .expect("cities fit their schema")
}

/// The YAML of the `tables:` entry of [`cities`] written at `path`.
pub fn cities_table_yaml(path: &Path, format: &str) -> String {
    let schema = if format == "parquet" {
        String::new()
    } else {
        "    schema:\n      - {name: name, type: string}\n      - {name: country, type: string}\n      - {name: pop, type: bigint}\n".to_string()
    };
    format!(
        "tables:\n  cities:\n    path: {}\n    format: {format}\n{schema}",
        path.display()
    )
}
