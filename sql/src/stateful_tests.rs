//! A stateful query split into map, merge and finish gives what the same
//! SQL gives over all of the input at once.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use super::*;
use crate::guard::DEFAULT_BUDGET as BUDGET;
use crate::{InputBatches, check, run};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::Int64, false),
        Field::new("tag", DataType::Utf8, true),
    ]))
}

/// The one stream table `input`, of [`schema`].
fn streams() -> [(String, SchemaRef); 1] {
    [(crate::INPUT.to_owned(), schema())]
}

fn rows(values: std::ops::Range<i64>) -> RecordBatch {
    let tags: StringArray = values
        .clone()
        .map(|v| (v % 7 != 0).then(|| format!("t{}", v % 5)))
        .collect();
    let values: Int64Array = values.collect();
    RecordBatch::try_new(schema(), vec![Arc::new(values), Arc::new(tags)]).unwrap()
}

fn stream(batches: Vec<RecordBatch>) -> InputBatches {
    Box::pin(futures::stream::iter(batches.into_iter().map(Ok)))
}

/// Each row as text, sorted: a multiset to compare.
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
    out.sort();
    out
}

async fn drain(mut out: crate::Output) -> Vec<RecordBatch> {
    let mut all = Vec::new();
    while let Some(b) = out.next().await {
        all.push(b.unwrap());
    }
    all
}

async fn plan(sql: &str, input: Vec<RecordBatch>) -> Aggregation {
    Aggregation::plan(sql, schema(), stream(input), &[], BUDGET)
        .await
        .unwrap()
        .expect("a stateful query")
}

/// Runs `sql` as a stream of `batches` batches of two map tasks each,
/// keeping the whole state; returns the last batch's complete output.
async fn streamed(sql: &str, total: i64, batches: i64) -> Vec<RecordBatch> {
    let per = total / batches;
    let mut state: Vec<RecordBatch> = Vec::new();
    let mut output = Vec::new();
    for b in 0..batches {
        let (start, end) = (
            b * per,
            if b + 1 == batches {
                total
            } else {
                (b + 1) * per
            },
        );
        let mid = (start + end) / 2;
        let mut partials = Vec::new();
        for range in [start..mid, mid..end] {
            let map = plan(sql, vec![rows(range)]).await;
            partials.extend(drain(map.map().unwrap()).await);
        }
        let reduce = plan(sql, Vec::new()).await;
        let mut input = state.clone();
        input.extend(partials);
        state = reduce.merge(input).await.unwrap();
        output = reduce.finish(state.clone()).await.unwrap();
    }
    output
}

async fn at_once(sql: &str, total: i64) -> Vec<RecordBatch> {
    drain(
        run(sql, schema(), stream(vec![rows(0..total)]), &[], BUDGET)
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_streamed_aggregation_equals_the_batch_result() {
    for sql in [
        "SELECT value % 10 AS k, count(*) AS n, sum(value) AS s, min(value) AS lo, max(value) AS hi, avg(value) AS mean FROM input GROUP BY value % 10",
        "SELECT tag, count(tag) AS n, count(DISTINCT value % 13) AS d FROM input WHERE value % 3 <> 0 GROUP BY tag",
        "SELECT tag, approx_distinct(value) AS d FROM input GROUP BY tag HAVING count(*) > 100",
        "SELECT DISTINCT tag, value % 4 AS r FROM input",
        "SELECT count(*) AS n, sum(value) AS s FROM input",
    ] {
        let want = lines(&at_once(sql, 5000).await);
        let got = lines(&streamed(sql, 5000, 4).await);
        assert_eq!(got, want, "{sql}");
    }
}

#[tokio::test]
async fn merging_is_deterministic_and_state_has_the_partial_schema() {
    let sql = "SELECT tag, count(*) AS n, avg(value) AS a FROM input GROUP BY tag";
    let map = plan(sql, vec![rows(0..1000)]).await;
    assert_eq!(map.key_columns(), 1);
    let partials = drain(map.map().unwrap()).await;
    let reduce = plan(sql, Vec::new()).await;
    let once = reduce.merge(partials.clone()).await.unwrap();
    let twice = reduce.merge(partials).await.unwrap();
    assert_eq!(once, twice);
    assert_eq!(once[0].schema(), reduce.partial_schema());
    let output = reduce.output_schema();
    let names: Vec<&str> = output.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["tag", "n", "a"]);
}

#[tokio::test]
async fn check_names_the_grouping_key_of_a_stateful_query() {
    let keys =
        |sql: &'static str| async move { check(sql, &streams(), &[], BUDGET).await.unwrap().keys };
    assert_eq!(keys("SELECT value FROM input").await, None);
    assert_eq!(
        keys("SELECT tag, count(*) AS n FROM input GROUP BY tag").await,
        Some(vec!["input.tag".to_string()])
    );
    assert_eq!(
        keys("SELECT DISTINCT tag FROM input").await,
        Some(vec!["tag".to_string()])
    );
    let stateless = Aggregation::plan(
        "SELECT value FROM input",
        schema(),
        stream(vec![]),
        &[],
        BUDGET,
    );
    assert!(stateless.await.unwrap().is_none());
}
