//! The SQL oracle: what a query should have written, computed here with
//! DataFusion over the whole input at once, and what the sink holds, both
//! as sorted JSON lines, so that they compare as multisets.
//!
//! The oracle is independent of Sluice's execution: a default DataFusion
//! session, one in-memory table holding every input row, one query.

use sluice_common::checkpoint::Record;
use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use sluice_common::sink::{FileSink, encode_jsonl};
use sluice_common::storage::Stores;

/// Every row of a bounded rate source: `total` rows at `rows_per_second`
/// from `start_ms`, as partition 0 of 1 (the same rows in another order).
pub fn rate_input(start_ms: i64, rows_per_second: u64, total: u64) -> Vec<RecordBatch> {
    sluice_common::rate::generate(0, 1, rows_per_second, start_ms, 0, total)
        .expect("rate rows generate")
}

/// The rate source's start, from the query's checkpoint.
pub fn rate_start_ms(checkpoint_root: &Path, query: &str) -> i64 {
    let path = crate::check::query_dir(checkpoint_root, query).join(Record::RateStart.rel());
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("sources/rate is JSON");
    v["start_ms"].as_i64().expect("sources/rate has start_ms")
}

/// `sql` over `input` (the table `input`), as sorted JSON lines.
pub async fn expected(sql: &str, input: Vec<RecordBatch>) -> Vec<String> {
    expected_with(sql, input, &[]).await
}

/// `sql` over `input` and the static `tables` (name, rows), as sorted
/// JSON lines.
pub async fn expected_with(
    sql: &str,
    input: Vec<RecordBatch>,
    tables: &[(&str, RecordBatch)],
) -> Vec<String> {
    let out = expected_batches_with(sql, input, tables).await;
    lines(&encode_jsonl(&out).expect("oracle rows encode"))
}

/// Every row of the files that the sink's manifests list, as sorted JSON
/// lines. A file listed twice, or missing, fails the test.
pub async fn committed(sink: &Path) -> Vec<String> {
    let location = sink.to_str().expect("utf-8 sink path");
    committed_at(&Stores::default(), location).await
}

/// [`committed`] for a sink at any location (`s3://...`), read through
/// `stores`.
pub async fn committed_at(stores: &Stores, location: &str) -> Vec<String> {
    let files = FileSink::open(stores, location).expect("sink opens");
    let mut seen = std::collections::BTreeSet::new();
    let mut all = Vec::new();
    for m in files.manifests().await.expect("manifests read") {
        for f in m.files {
            assert!(seen.insert(f.path.clone()), "{} is listed twice", f.path);
            let key = sluice_common::storage::Path::from(f.path.as_str());
            let bytes = files
                .storage()
                .get(&key)
                .await
                .unwrap_or_else(|e| panic!("{} is listed but cannot be read: {e}", f.path))
                .unwrap_or_else(|| panic!("{} is listed but missing", f.path));
            let rows = lines(&bytes);
            assert_eq!(rows.len() as u64, f.rows, "{} has {} rows", f.path, f.rows);
            all.extend(rows);
        }
    }
    all.sort();
    all
}

fn lines(bytes: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(bytes).expect("jsonl is UTF-8");
    let mut out: Vec<String> = text.lines().map(str::to_string).collect();
    out.sort();
    out
}

/// `sql` over `input` and the static `tables`, computed in one piece.
pub async fn expected_batches_with(
    sql: &str,
    input: Vec<RecordBatch>,
    tables: &[(&str, RecordBatch)],
) -> Vec<RecordBatch> {
    let ctx = SessionContext::new();
    // A query over named streams has no `input`: they come as `tables`.
    if let Some(first) = input.first() {
        let table = MemTable::try_new(first.schema(), vec![input]).expect("input table");
        ctx.register_table("input", Arc::new(table))
            .expect("input registers");
    }
    for (name, rows) in tables {
        let t = MemTable::try_new(rows.schema(), vec![vec![rows.clone()]]).expect("a table");
        ctx.register_table(*name, Arc::new(t))
            .expect("a table registers");
    }
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("the oracle cannot plan {sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("the oracle cannot run {sql}: {e}"))
}

/// Rows as comparable text: each a JSON object whose keys are sorted and
/// whose values are all strings (a null is left out, as jsonl leaves it
/// out), sorted. A partition
/// column read back from a directory name compares equal to the column
/// it came from.
pub fn normalized(rows: &[String]) -> Vec<String> {
    let mut out: Vec<String> = rows
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
            let obj = v.as_object().expect("a JSON object");
            let sorted: std::collections::BTreeMap<&String, String> = obj
                .iter()
                .filter_map(|(k, v)| match v {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(s) => Some((k, s.clone())),
                    other => Some((k, other.to_string())),
                })
                .collect();
            serde_json::to_string(&sorted).expect("a row encodes")
        })
        .collect();
    out.sort();
    out
}

/// Every row of the files the sink's manifests list, in any format, with
/// the partition columns of Hive-style directories put back, normalized
/// (see [`normalized`]). `schema` is the query's output schema. A file
/// listed twice fails the test.
pub async fn committed_any(sink: &Path, schema: &arrow_schema::SchemaRef) -> Vec<String> {
    let mut all: Vec<String> = committed_batches(sink, schema)
        .await
        .into_values()
        .flatten()
        .collect();
    all.sort();
    all
}

/// As [`committed_any`], but the rows of each batch's manifest apart, by
/// batch id: what each batch committed, normalized.
pub async fn committed_batches(
    sink: &Path,
    schema: &arrow_schema::SchemaRef,
) -> std::collections::BTreeMap<u64, Vec<String>> {
    let location = sink.to_str().expect("utf-8 sink path");
    let files = FileSink::open(&Stores::default(), location).expect("sink opens");
    let mut seen = std::collections::BTreeSet::new();
    let mut out = std::collections::BTreeMap::new();
    for m in files.manifests().await.expect("manifests read") {
        let mut all = Vec::new();
        for f in m.files {
            assert!(seen.insert(f.path.clone()), "{} is listed twice", f.path);
            let bytes = std::fs::read(sink.join(&f.path))
                .unwrap_or_else(|e| panic!("{} is listed but cannot be read: {e}", f.path));
            let dirs: Vec<(String, Option<String>)> = f
                .path
                .split('/')
                .filter_map(|seg| seg.split_once('='))
                .map(|(k, v)| {
                    let v = (v != "__HIVE_DEFAULT_PARTITION__").then(|| unescape(v));
                    (unescape(k), v)
                })
                .collect();
            let data = Arc::new(arrow_schema::Schema::new(
                schema
                    .fields()
                    .iter()
                    .filter(|fl| !dirs.iter().any(|(k, _)| k == fl.name()))
                    .map(|fl| fl.as_ref().clone())
                    .collect::<Vec<_>>(),
            ));
            let rows = read_any(&f.path, bytes, data);
            assert_eq!(rows.len() as u64, f.rows, "{} has {} rows", f.path, f.rows);
            for line in rows {
                let mut v: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&line).expect("a JSON row");
                for (k, val) in &dirs {
                    let val = val
                        .clone()
                        .map_or(serde_json::Value::Null, serde_json::Value::String);
                    v.insert(k.clone(), val);
                }
                all.push(serde_json::to_string(&v).expect("a row encodes"));
            }
        }
        let previous = out.insert(m.batch_id, normalized(&all));
        assert!(previous.is_none(), "two manifests of batch {}", m.batch_id);
    }
    out
}

/// A file's rows as JSON lines (absent values dropped, as jsonl writes them).
fn read_any(name: &str, bytes: Vec<u8>, data: arrow_schema::SchemaRef) -> Vec<String> {
    let batches: Vec<RecordBatch> = match name.rsplit('.').next() {
        Some("csv") => arrow_csv::ReaderBuilder::new(data)
            .with_header(true)
            .build(std::io::Cursor::new(bytes))
            .expect("csv reader")
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{name}: {e}")),
        Some("parquet") => parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            bytes::Bytes::from(bytes),
        )
        .and_then(|b| b.build())
        .expect("parquet reader")
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{name}: {e}")),
        _ => return lines(&bytes),
    };
    lines(&encode_jsonl(&batches).expect("rows encode"))
}

/// A directory name's percent-escapes decoded.
fn unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let Some(v) = hex {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).expect("utf-8 directory name")
}

/// `batches` as one batch (they share a schema).
pub fn concat(batches: &[RecordBatch]) -> RecordBatch {
    datafusion::arrow::compute::concat_batches(&batches[0].schema(), batches)
        .expect("batches of one schema concatenate")
}
