//! The SQL oracle: what a query should have written, computed here with
//! DataFusion over the whole input at once, and what the sink holds, both
//! as sorted JSON lines, so that they compare as multisets.
//!
//! The oracle is independent of Sluice's execution: a default DataFusion
//! session, one in-memory table holding every input row, one query.

use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use sluice_common::sink::{FileSink, encode_jsonl};

/// Every row of a bounded rate source: `total` rows at `rows_per_second`
/// from `start_ms`, as partition 0 of 1 (the same rows in another order).
pub fn rate_input(start_ms: i64, rows_per_second: u64, total: u64) -> Vec<RecordBatch> {
    sluice_common::rate::generate(0, 1, rows_per_second, start_ms, 0, total)
        .expect("rate rows generate")
}

/// The rate source's start, from the query's checkpoint.
pub fn rate_start_ms(checkpoint_root: &Path, query: &str) -> i64 {
    let path = crate::check::query_dir(checkpoint_root, query).join("sources/rate");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("sources/rate is JSON");
    v["start_ms"].as_i64().expect("sources/rate has start_ms")
}

/// `sql` over `input` (the table `input`), as sorted JSON lines.
pub async fn expected(sql: &str, input: Vec<RecordBatch>) -> Vec<String> {
    let schema = input[0].schema();
    let ctx = SessionContext::new();
    let table = MemTable::try_new(schema, vec![input]).expect("input table");
    ctx.register_table("input", Arc::new(table))
        .expect("input registers");
    let out = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("the oracle cannot plan {sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("the oracle cannot run {sql}: {e}"));
    lines(&encode_jsonl(&out).expect("oracle rows encode"))
}

/// Every row of the files that the sink's manifests list, as sorted JSON
/// lines. A file listed twice, or missing, fails the test.
pub async fn committed(sink: &Path) -> Vec<String> {
    let location = sink.to_str().expect("utf-8 sink path");
    let files = FileSink::open(location).expect("sink opens");
    let mut seen = std::collections::BTreeSet::new();
    let mut all = Vec::new();
    for m in files.manifests().await.expect("manifests read") {
        for f in m.files {
            assert!(seen.insert(f.path.clone()), "{} is listed twice", f.path);
            let bytes = std::fs::read(sink.join(&f.path))
                .unwrap_or_else(|e| panic!("{} is listed but cannot be read: {e}", f.path));
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
