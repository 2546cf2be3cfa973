//! Checking and running SQL over an in-memory input.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::*;
use crate::guard::DEFAULT_BUDGET as BUDGET;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::UInt64, false),
        Field::new("tags", DataType::Utf8, true),
    ]))
}

/// The one stream table `input`, of [`schema`].
fn streams() -> [(String, SchemaRef); 1] {
    [(crate::INPUT.to_owned(), schema())]
}

fn batches(n: u64) -> Vec<RecordBatch> {
    (0..n)
        .step_by(100)
        .map(|start| {
            let end = (start + 100).min(n);
            let values: UInt64Array = (start..end).collect();
            let tags: StringArray = (start..end).map(|v| Some(format!("a{v},b"))).collect();
            RecordBatch::try_new(schema(), vec![Arc::new(values), Arc::new(tags)]).unwrap()
        })
        .collect()
}

fn input(n: u64) -> InputBatches {
    Box::pin(futures::stream::iter(batches(n).into_iter().map(Ok)))
}

async fn collect(sql: &str, n: u64) -> Vec<RecordBatch> {
    let mut out = run(sql, schema(), input(n), &[], BUDGET).await.unwrap();
    let mut all = Vec::new();
    while let Some(b) = out.next().await {
        all.push(b.unwrap());
    }
    all
}

fn err(r: Result<Checked, SqlError>) -> String {
    r.expect_err("the SQL was accepted").to_string()
}

#[tokio::test]
async fn a_filter_and_projection_keep_the_input_order() {
    let out = collect(
        "SELECT value, value % 1000 AS k FROM input WHERE value % 1000 < 900",
        2500,
    )
    .await;
    let values: Vec<u64> = out
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
            a.values().to_vec()
        })
        .collect();
    let want: Vec<u64> = (0..2500).filter(|v| v % 1000 < 900).collect();
    assert_eq!(values, want);
    assert_eq!(out[0].schema().field(1).name(), "k");
}

#[tokio::test]
async fn unnest_runs_and_a_rerun_gives_the_same_rows() {
    let sql = "SELECT value, unnest(string_to_array(tags, ',')) AS tag FROM input";
    let a = collect(sql, 300).await;
    let b = collect(sql, 300).await;
    assert_eq!(a, b);
    let rows: usize = a.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 600);
    assert!(!a[0].column(1).is_empty());
}

#[tokio::test]
async fn the_default_query_passes_every_column() {
    let out = check(DEFAULT_SQL, &streams(), &[], BUDGET).await.unwrap();
    assert_eq!(out.output.as_ref(), schema().as_ref());
}

#[tokio::test]
async fn bad_sql_is_refused_naming_what_is_wrong() {
    let e = err(check("SELEC value FROM input", &streams(), &[], BUDGET).await);
    assert!(e.contains("SELEC"), "{e}");
    let e = err(check("SELECT nope FROM input", &streams(), &[], BUDGET).await);
    assert!(e.contains("nope"), "{e}");
    let e = err(check("SELECT * FROM elsewhere", &streams(), &[], BUDGET).await);
    assert!(e.contains("elsewhere"), "{e}");
}

#[tokio::test]
async fn constructs_that_need_state_or_order_are_refused_by_name() {
    for (sql, named) in [
        (
            "SELECT tags, median(value) FROM input GROUP BY tags",
            "median",
        ),
        (
            "SELECT tags, sum(DISTINCT value) FROM input GROUP BY tags",
            "sum(DISTINCT ...)",
        ),
        ("SELECT DISTINCT ON (tags) value FROM input", "DISTINCT ON"),
        (
            "SELECT tags, value, count(*) FROM input GROUP BY ROLLUP (tags, value)",
            "ROLLUP",
        ),
        ("SELECT value FROM input ORDER BY value", "ORDER BY"),
        ("SELECT value FROM input LIMIT 5", "LIMIT"),
        (
            "SELECT value, row_number() OVER (ORDER BY value) FROM input",
            "row_number",
        ),
        ("CREATE TABLE t AS SELECT * FROM input", "other than SELECT"),
        ("SELECT value, now() AS t FROM input", "now"),
        ("SELECT value FROM input WHERE random() < 0.5", "random"),
        ("SELECT uuid() AS id FROM input", "uuid"),
    ] {
        let e = err(check(sql, &streams(), &[], BUDGET).await);
        assert!(e.contains("not supported"), "{sql}: {e}");
        assert!(e.contains(named), "{sql}: {e}");
    }
}

#[tokio::test]
async fn functions_fixed_by_their_arguments_are_accepted() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("value", DataType::UInt64, false),
        Field::new(
            "timestamp_ms",
            DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    for sql in [
        "SELECT value, upper(concat('v', CAST(value AS VARCHAR))) AS label, sqrt(CAST(value AS DOUBLE)) AS root, \
         date_trunc('second', timestamp_ms) AS second, regexp_like(CAST(value AS VARCHAR), '^1') AS ones \
         FROM input WHERE value % 10 < 3 AND value > 100",
        "SELECT value, unnest(string_to_array(concat(CAST(value % 3 AS VARCHAR), ',x'), ',')) AS part FROM input",
        "SELECT to_char(timestamp_ms, '%Y') AS y, date_part('hour', timestamp_ms) AS h, abs(CAST(value AS BIGINT) - 5) AS d FROM input",
    ] {
        check(sql, &[(INPUT.to_owned(), schema.clone())], &[], BUDGET)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

fn kinds() -> crate::Table {
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
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
    crate::Table {
        name: "kinds".into(),
        schema,
        batches: Arc::new(vec![rows]),
    }
}

#[tokio::test]
async fn the_stream_joins_a_static_table_and_keeping_the_tables_side_is_refused() {
    let t = kinds();
    let sql = "SELECT value, k.name FROM input JOIN kinds k ON CAST(value % 2 AS BIGINT) = k.k";
    let mut out = run(sql, schema(), input(10), std::slice::from_ref(&t), BUDGET)
        .await
        .unwrap();
    let mut rows = 0;
    while let Some(b) = out.next().await {
        let b = b.unwrap();
        let names = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        let values = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        for i in 0..b.num_rows() {
            let want = if values.value(i) % 2 == 0 {
                "even"
            } else {
                "odd"
            };
            assert_eq!(names.value(i), want);
        }
        rows += b.num_rows();
    }
    assert_eq!(rows, 10);
    let tables = [(t.name.clone(), t.schema.clone())];
    let right = "SELECT value FROM input RIGHT JOIN kinds k ON CAST(value % 2 AS BIGINT) = k.k";
    let e = check(right, &streams(), &tables, BUDGET)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("keeps the static table's side"), "{e}");
    let left = "SELECT value FROM input LEFT JOIN kinds k ON CAST(value % 2 AS BIGINT) = k.k";
    check(left, &streams(), &tables, BUDGET).await.unwrap();
}

#[tokio::test]
async fn a_query_that_emits_nothing_still_reads_its_whole_input() {
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let empty = crate::Table {
        batches: Arc::new(Vec::new()),
        ..kinds()
    };
    let queries = [
        "SELECT value FROM input WHERE false",
        "SELECT * FROM input WHERE 1 = 0",
        "SELECT value, k.name FROM input JOIN kinds k ON CAST(value % 2 AS BIGINT) = k.k",
    ];
    for sql in queries {
        let read = Arc::new(AtomicUsize::new(0));
        let counted = read.clone();
        let input: InputBatches = Box::pin(futures::stream::iter(batches(1000)).map(move |b| {
            counted.fetch_add(b.num_rows(), Ordering::SeqCst);
            Ok(b)
        }));
        let mut out = run(sql, schema(), input, std::slice::from_ref(&empty), BUDGET)
            .await
            .unwrap();
        while let Some(b) = out.next().await {
            assert_eq!(b.unwrap().num_rows(), 0, "{sql}");
        }
        out.read_rest().await.unwrap();
        assert_eq!(read.load(Ordering::SeqCst), 1000, "{sql}");
    }
}

#[tokio::test]
async fn functions_that_grow_from_a_number_are_bounded_per_call() {
    let ok = collect("SELECT repeat('ab', 3) AS s, range(3) AS r FROM input", 2).await;
    let s = ok[0].column(0);
    assert_eq!(
        arrow_cast::display::array_value_to_string(s, 0).unwrap(),
        "ababab"
    );
    for sql in [
        "SELECT repeat('x', 1000000000) AS s FROM input",
        "SELECT value, lpad('x', 100000000) AS s FROM input",
        "SELECT range(100000000) AS r FROM input",
        "SELECT repeat(tags, CAST(value * 100000000 AS BIGINT)) AS s FROM input",
    ] {
        let mut out = run(sql, schema(), input(100), &[], BUDGET).await.unwrap();
        let e = loop {
            match out.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break e,
                None => panic!("{sql}: no error"),
            }
        };
        assert!(!e.is_retryable(), "{sql}: {e}");
        assert!(
            e.to_string()
                .contains("bytes for one batch, above the limit of 268435456"),
            "{sql}: {e}"
        );
    }
}

#[tokio::test]
async fn a_query_past_its_memory_pool_fails_and_is_not_retried() {
    let limits = RunLimits {
        budget: BUDGET,
        memory: Some(100_000),
    };
    let sql = "SELECT value, count(*) AS n FROM input GROUP BY value";
    let mut out = run(sql, schema(), input(100_000), &[], limits)
        .await
        .unwrap();
    let e = loop {
        match out.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("the aggregation fit in 100 kB"),
        }
    };
    assert!(matches!(e, SqlError::Resources(_)), "{e:?}");
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("--max-task-memory-bytes"), "{e}");
}
