//! A top-N split into map, rank and finish, batch after batch, gives what
//! the same SQL gives over all of the input at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use super::*;
use crate::guard::DEFAULT_BUDGET as BUDGET;
use crate::{check, run};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::Int64, false),
        Field::new("tag", DataType::Utf8, true),
    ]))
}

fn streams() -> [(String, SchemaRef); 1] {
    [(crate::INPUT.to_owned(), schema())]
}

/// Rows `range`, whose values arrive out of order (a permutation of
/// 0..1000) and whose tags repeat, some NULL.
fn rows(range: std::ops::Range<i64>) -> RecordBatch {
    let tags: StringArray = range
        .clone()
        .map(|v| (v % 7 != 0).then(|| format!("t{}", v % 5)))
        .collect();
    let values: Int64Array = range.map(|v| (v * 37) % 1000).collect();
    RecordBatch::try_new(schema(), vec![Arc::new(values), Arc::new(tags)]).unwrap()
}

fn stream(batches: Vec<RecordBatch>) -> crate::InputBatches {
    Box::pin(futures::stream::iter(batches.into_iter().map(Ok)))
}

/// Each row as text.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("null");
    let mut out = Vec::new();
    for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(r).to_string()).collect();
            out.push(cells.join("|"));
        }
    }
    out
}

async fn drain(mut out: crate::Output) -> Vec<RecordBatch> {
    let mut all = Vec::new();
    while let Some(b) = out.next().await {
        all.push(b.unwrap());
    }
    all
}

const TOP3: &str = "SELECT tag, value, rn FROM \
    (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value DESC) AS rn FROM input) \
    WHERE rn <= 3";

/// Runs `sql` batch by batch, keeping every group's ranked rows; returns
/// the last output row of each (output key) in `key` columns, as text.
async fn streamed(sql: &str, batches: &[std::ops::Range<i64>], key: &[usize]) -> Vec<String> {
    let mut kept: Vec<RecordBatch> = Vec::new();
    let mut kept_ranks: Vec<Option<u64>> = Vec::new();
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for range in batches {
        let top = TopN::plan(
            sql,
            schema(),
            stream(vec![rows(range.clone())]),
            &[],
            BUDGET,
        )
        .await
        .unwrap()
        .expect("a top-N");
        let new = drain(top.map().unwrap()).await;
        let mut all = kept.clone();
        all.extend(new);
        let candidates =
            datafusion::arrow::compute::concat_batches(&top.row_schema(), &all).unwrap();
        let mut ranks = kept_ranks.clone();
        ranks.resize(candidates.num_rows(), None);
        let changed = top.rank(&candidates, &ranks).unwrap();
        let rows_at: UInt32Array = changed.iter().map(|(i, _)| *i).collect();
        let changed_rows =
            datafusion::arrow::compute::take_record_batch(&candidates, &rows_at).unwrap();
        let rank_of: UInt64Array = changed.iter().map(|(_, r)| *r).collect();
        let ranked = top.ranked(&changed_rows, rank_of.clone()).unwrap();
        for line in lines(&top.finish(vec![ranked]).await.unwrap()) {
            let cells: Vec<&str> = line.split('|').collect();
            let k: Vec<&str> = key.iter().map(|&i| cells[i]).collect();
            latest.insert(k.join("|"), line.clone());
        }
        // The kept state: each group's rows at ranks 1..=N, as the
        // executor keeps them (rank order does not matter to `rank`).
        let mut at: BTreeMap<(String, u64), (u32, u64)> = BTreeMap::new();
        let groups = lines(&[candidates.project(&[1]).unwrap()]);
        for (i, r) in ranks.iter().enumerate() {
            if let Some(r) = r {
                at.insert((groups[i].clone(), *r), (i as u32, *r));
            }
        }
        for (i, r) in &changed {
            at.insert((groups[*i as usize].clone(), *r), (*i, *r));
        }
        let idx: UInt32Array = at.values().map(|(i, _)| *i).collect();
        kept = vec![datafusion::arrow::compute::take_record_batch(&candidates, &idx).unwrap()];
        kept_ranks = at.values().map(|(_, r)| Some(*r)).collect();
    }
    latest.into_values().collect()
}

async fn at_once(sql: &str, total: i64) -> Vec<String> {
    let out = run(sql, schema(), stream(vec![rows(0..total)]), &[], BUDGET)
        .await
        .unwrap();
    let mut lines = lines(&drain(out).await);
    lines.sort();
    lines
}

#[tokio::test]
async fn a_top_n_batch_by_batch_equals_the_top_n_of_all_rows() {
    let batches = [0..40, 40..45, 45..300, 300..301, 301..1000];
    let mut got = streamed(TOP3, &batches, &[0, 2]).await;
    got.sort();
    assert_eq!(got, at_once(TOP3, 1000).await);
    assert_eq!(got.len(), 6 * 3, "five tags and NULL, three rows each");
}

#[tokio::test]
async fn a_top_1_without_its_rank_column_is_one_row_per_group() {
    let sql = "SELECT tag, value FROM \
        (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value ASC) AS rn FROM input) \
        WHERE rn = 1";
    let mut got = streamed(sql, &[0..10, 10..500, 500..1000], &[0]).await;
    got.sort();
    assert_eq!(got, at_once(sql, 1000).await);
    assert_eq!(got.len(), 6);
}

#[tokio::test]
async fn ties_go_to_the_row_that_arrived_first() {
    let sql = "SELECT * FROM \
        (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value % 2) AS rn FROM input) \
        WHERE rn <= 2";
    let top = TopN::plan(sql, schema(), stream(Vec::new()), &[], BUDGET)
        .await
        .unwrap()
        .unwrap();
    // One group: values 5, 3, 8 arrived (kept at ranks 1, 2, and one not
    // kept), then 4 and 6 arrive: the even values rank first, 8 before
    // 4 before 6.
    let values: Int64Array = vec![5, 3, 8, 4, 6].into();
    let tags: StringArray = vec![Some("a"); 5].into();
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(values), Arc::new(tags)]).unwrap();
    let changed = top
        .rank(&batch, &[Some(2), None, Some(1), None, None])
        .unwrap();
    assert_eq!(changed, vec![(3, 2)], "8 keeps rank 1, 4 takes rank 2");
}

#[tokio::test]
async fn check_gives_n_and_refuses_other_ranks() {
    let checked = check(
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value DESC) AS rn FROM input) WHERE 10 >= rn",
        &streams(),
        &[],
        BUDGET,
    )
    .await
    .unwrap();
    assert_eq!(checked.top_n, Some(TopNInfo { limit: 10 }));
    let refused = [
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value) AS rn FROM input)",
            "ROW_NUMBER() without a filter `rn <= N` on it",
        ),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value) AS rn FROM input) WHERE rn = 2",
            "ROW_NUMBER() without a filter `rn <= N` on it",
        ),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value) AS rn FROM input) WHERE rn <= 3 AND value > 4",
            "ROW_NUMBER() without a filter `rn <= N` on it",
        ),
        (
            "SELECT tag, value FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value) AS rn FROM input) WHERE rn <= 3",
            "a top-3 whose rank is not an output column",
        ),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY tag ORDER BY value) AS rn FROM input) WHERE rn < 1",
            "a top-N that keeps 0 rows",
        ),
        (
            "SELECT *, RANK() OVER (PARTITION BY tag ORDER BY value) FROM input",
            "the window function rank",
        ),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY value) AS rn FROM input) WHERE rn <= 3",
            "the window function row_number",
        ),
    ];
    for (sql, construct) in refused {
        let e = check(sql, &streams(), &[], BUDGET)
            .await
            .expect_err(sql)
            .to_string();
        assert!(e.contains(construct), "{sql}: {e}");
    }
}
