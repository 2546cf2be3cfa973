//! A query over several stream tables: run once per stream, each task
//! reading one stream with the others empty, the tasks' outputs together
//! are what DataFusion computes over all the streams at once; and the
//! queries that would not be are refused, naming the stream.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use crate::guard::DEFAULT_BUDGET as BUDGET;
use crate::{Aggregation, InputBatches, Output, Streams, Table, check, run};

/// `a` has an id and an amount; `b` has a note too.
fn schema(stream: &str) -> SchemaRef {
    let mut fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Int64, false),
    ];
    if stream == "b" {
        fields.push(Field::new("note", DataType::Utf8, true));
    }
    Arc::new(Schema::new(fields))
}

/// The rows of `stream`: `a` has ids 0..500, `b` 1000..1300, in batches of
/// 100.
fn batches(stream: &str) -> Vec<RecordBatch> {
    let ids = if stream == "a" { 0..500 } else { 1000..1300 };
    ids.step_by(100)
        .map(|start| {
            let ids: Vec<i64> = (start..start + 100).collect();
            let amount: Int64Array = ids.iter().map(|i| i * 7 % 31).collect();
            let mut columns: Vec<Arc<dyn arrow_array::Array>> =
                vec![Arc::new(Int64Array::from(ids.clone())), Arc::new(amount)];
            if stream == "b" {
                let notes: StringArray = ids.iter().map(|i| Some(format!("n{}", i % 3))).collect();
                columns.push(Arc::new(notes));
            }
            RecordBatch::try_new(schema(stream), columns).unwrap()
        })
        .collect()
}

fn tables() -> Vec<(String, SchemaRef)> {
    ["a", "b"].map(|s| (s.to_owned(), schema(s))).to_vec()
}

/// The streams `a` and `b`, the task reading `reading`.
fn streams(reading: &str) -> Streams {
    Streams {
        tables: tables(),
        reading: reading.to_owned(),
    }
}

fn input(stream: &str) -> InputBatches {
    Box::pin(futures::stream::iter(batches(stream).into_iter().map(Ok)))
}

/// The static table `kinds`: `k` 0 and 1, named even and odd.
fn kinds() -> Table {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![0, 1])),
            Arc::new(StringArray::from(vec!["even", "odd"])),
        ],
    )
    .unwrap();
    Table {
        name: "kinds".into(),
        schema,
        batches: Arc::new(vec![rows]),
    }
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

async fn drain(mut out: Output) -> Vec<RecordBatch> {
    let mut all = Vec::new();
    while let Some(b) = out.next().await {
        all.push(b.unwrap());
    }
    out.read_rest().await.unwrap();
    all
}

/// `sql` over all of `a`, `b` and `kinds` at once, in a plain session.
async fn at_once(sql: &str) -> Vec<String> {
    let ctx = SessionContext::new();
    for s in ["a", "b"] {
        let table = MemTable::try_new(schema(s), vec![batches(s)]).unwrap();
        ctx.register_table(s, Arc::new(table)).unwrap();
    }
    let k = kinds();
    let table = MemTable::try_new(k.schema.clone(), vec![k.batches.to_vec()]).unwrap();
    ctx.register_table("kinds", Arc::new(table)).unwrap();
    lines(&ctx.sql(sql).await.unwrap().collect().await.unwrap())
}

/// `sql` as one task per stream, each reading its stream.
async fn per_task(sql: &str) -> Vec<String> {
    let mut all = Vec::new();
    for s in ["a", "b"] {
        let out = run(sql, streams(s), input(s), &[kinds()], BUDGET).await;
        all.extend(drain(out.unwrap()).await);
    }
    lines(&all)
}

#[tokio::test]
async fn a_union_of_streams_run_a_task_per_stream_equals_the_batch_answer() {
    for sql in [
        "SELECT id, amount FROM a WHERE amount % 3 <> 0 UNION ALL SELECT id, amount * 10 FROM b",
        "SELECT id, 'a' AS src FROM a UNION ALL SELECT id, note FROM b WHERE note <> 'n1'",
    ] {
        let got = per_task(sql).await;
        assert_eq!(got, at_once(sql).await, "{sql}");
        assert!(got.len() > 500, "{sql}: {}", got.len());
    }
}

#[tokio::test]
async fn a_stream_joins_a_static_table_while_another_stream_is_empty() {
    for sql in [
        "SELECT a.id, k.name FROM a JOIN kinds k ON a.id % 2 = k.k UNION ALL SELECT id, note FROM b",
        "SELECT u.id, k.name FROM (SELECT id FROM a UNION ALL SELECT id FROM b) u \
         LEFT JOIN kinds k ON u.id % 3 = k.k",
        "SELECT id FROM a WHERE id % 2 IN (SELECT k FROM kinds) UNION ALL SELECT id FROM b",
    ] {
        check(sql, &tables(), &[("kinds".into(), kinds().schema)], BUDGET)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(per_task(sql).await, at_once(sql).await, "{sql}");
    }
}

/// Each stream's task maps its stream; one reduce merges every partial.
async fn streamed(sql: &str) -> Vec<String> {
    let mut partials = Vec::new();
    for s in ["a", "b"] {
        let map = Aggregation::plan(sql, streams(s), input(s), &[], BUDGET).await;
        let map = map.unwrap().expect("a stateful query");
        partials.extend(drain(map.map().unwrap()).await);
    }
    let none: InputBatches = Box::pin(futures::stream::empty());
    let reduce = Aggregation::plan(sql, streams("a"), none, &[], BUDGET).await;
    let reduce = reduce.unwrap().expect("a stateful query");
    let state = reduce.merge(partials).await.unwrap();
    lines(&reduce.finish(state).await.unwrap())
}

#[tokio::test]
async fn an_aggregation_over_a_union_of_streams_equals_the_batch_answer() {
    for sql in [
        "SELECT k, count(*) AS n, sum(v) AS s, avg(v) AS m FROM \
         (SELECT id % 5 AS k, amount AS v FROM a UNION ALL SELECT id % 5, amount FROM b) GROUP BY k",
        "SELECT amount FROM a UNION SELECT amount + 20 FROM b",
    ] {
        assert_eq!(streamed(sql).await, at_once(sql).await, "{sql}");
        let checked = check(sql, &tables(), &[], BUDGET).await.unwrap();
        assert!(checked.keys.is_some(), "{sql}");
    }
}

async fn refusal(sql: &str) -> String {
    let statics = [("kinds".to_owned(), kinds().schema)];
    let e = check(sql, &tables(), &statics, BUDGET).await;
    e.expect_err(sql).to_string()
}

#[tokio::test]
async fn queries_not_linear_in_each_stream_are_refused_naming_the_stream() {
    const SEMI: &str =
        "Sluice joins two streams with inner, left, right and full outer joins on equal keys";
    for (sql, named) in [
        (
            "SELECT x.id FROM a x JOIN a y ON x.id = y.id UNION ALL SELECT id FROM b",
            "the query's output read from more than one stateful operator, or from a stream beside one",
        ),
        (
            "SELECT id FROM a",
            "a query that does not read the stream `b`",
        ),
        (
            "SELECT id FROM a",
            "read every source in `sources:` or remove it",
        ),
        (
            "SELECT a.id FROM a, b",
            "a join of `a` and `b` without equal keys",
        ),
        ("SELECT id FROM a WHERE id IN (SELECT id FROM b)", SEMI),
        (
            "SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.id = a.id)",
            SEMI,
        ),
        ("SELECT id FROM a INTERSECT SELECT id FROM b", SEMI),
        ("SELECT id FROM a EXCEPT SELECT id FROM b", SEMI),
        (
            "SELECT id FROM a UNION ALL SELECT k.k FROM b RIGHT JOIN kinds k ON b.id = k.k",
            "a Right join that keeps the static table's side",
        ),
        (
            "SELECT name FROM kinds WHERE k IN (SELECT id FROM a) UNION ALL SELECT note FROM b",
            "a subquery over the stream `a` in a query of static tables",
        ),
        (
            "SELECT id % 3 AS k, count(*) AS n FROM a GROUP BY id % 3 UNION ALL SELECT id, 1 FROM b",
            "the query's output read from more than one stateful operator, or from a stream beside one",
        ),
        (
            "SELECT id FROM a UNION ALL SELECT id FROM b ORDER BY id",
            "ORDER BY",
        ),
        (
            "SELECT id FROM a UNION ALL SELECT id FROM b UNION ALL SELECT k FROM kinds",
            "a UNION branch that reads no stream",
        ),
    ] {
        let e = refusal(sql).await;
        assert!(e.contains(named), "{sql}: {e}");
    }
}

#[tokio::test]
async fn the_one_stream_input_keeps_its_messages_and_a_task_reads_a_stream_of_the_query() {
    let only_input = [(crate::INPUT.to_owned(), schema("a"))];
    let e = check(
        "SELECT * FROM generate_series(1, 3)",
        &only_input,
        &[],
        BUDGET,
    )
    .await;
    let e = e.expect_err("no stream read").to_string();
    assert!(e.contains("does not read the stream `input`"), "{e}");
    assert!(e.contains("select FROM input"), "{e}");
    let none = check("SELECT 1 AS one", &[], &[], BUDGET).await;
    assert!(
        none.expect_err("no stream")
            .to_string()
            .contains("without a stream")
    );
    let e = run("SELECT id FROM a", streams("c"), input("a"), &[], BUDGET).await;
    let e = e.err().expect("c is no stream of the query").to_string();
    assert!(e.contains("`c`") && e.contains("a, b"), "{e}");
}
