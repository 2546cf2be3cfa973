//! Checks of a stateful query's sink against the one-piece oracle, by
//! output mode (Spark's semantics):
//!
//! - update: each batch emits the groups it changed; the latest emitted
//!   row of each group is the group's final row.
//! - complete: the last batch emits the whole result.
//! - a `SELECT DISTINCT` in update mode: each key is emitted once, ever.

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::RecordBatch;

use crate::oracle::{committed_batches, expected_with, normalized};

/// What each committed batch wrote, normalized, by batch id.
pub async fn batches(sink: &Path) -> BTreeMap<u64, Vec<String>> {
    let any = std::sync::Arc::new(arrow_schema::Schema::empty());
    committed_batches(sink, &any).await
}

/// The key of a normalized row: the values of `keys`, joined.
pub fn key_of(row: &str, keys: &[&str]) -> String {
    let v: serde_json::Value = serde_json::from_str(row).expect("a JSON row");
    keys.iter()
        .map(|k| v.get(*k).map_or("null".to_string(), |x| x.to_string()))
        .collect::<Vec<_>>()
        .join("|")
}

/// The latest row of each key over the batches, in batch order; a batch
/// that emits one key twice fails the test.
pub fn latest(batches: &BTreeMap<u64, Vec<String>>, keys: &[&str]) -> Vec<String> {
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for (id, rows) in batches {
        let mut seen = std::collections::BTreeSet::new();
        for r in rows {
            let k = key_of(r, keys);
            assert!(seen.insert(k.clone()), "batch {id} emits key {k} twice");
            last.insert(k, r.clone());
        }
    }
    let mut out: Vec<String> = last.into_values().collect();
    out.sort();
    out
}

/// The oracle's rows, normalized like the sink's.
pub async fn oracle(
    sql: &str,
    input: Vec<RecordBatch>,
    tables: &[(&str, RecordBatch)],
) -> Vec<String> {
    normalized(&expected_with(sql, input, tables).await)
}

/// The sink of a query in `mode` holds the oracle's result: the latest
/// row of each key (update), or the last batch (complete). A DISTINCT in
/// update mode emits every key once over all batches.
pub fn assert_matches(
    name: &str,
    mode: &str,
    batches: &BTreeMap<u64, Vec<String>>,
    keys: &[&str],
    want: &[String],
) {
    assert!(!want.is_empty(), "{name}: the oracle has rows");
    let got: Vec<String> = match mode {
        "update" => latest(batches, keys),
        "complete" => batches.values().last().cloned().unwrap_or_default(),
        "distinct" => {
            let mut all: Vec<String> = batches.values().flatten().cloned().collect();
            all.sort();
            all
        }
        other => panic!("no such mode {other}"),
    };
    assert_eq!(
        got.len(),
        want.len(),
        "{name}: row counts differ\n got {got:?}\nwant {want:?}"
    );
    assert!(
        got == want,
        "{name}: the sink differs from the oracle\n got {got:?}\nwant {want:?}"
    );
}
