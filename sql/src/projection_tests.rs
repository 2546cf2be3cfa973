//! Projection pushdown: a task's input is opened for the columns its plan
//! reads, and the plan's results do not change.

use std::sync::{Arc, Mutex};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::guard::DEFAULT_BUDGET as BUDGET;
use crate::{InputBatches, TaskInput, run};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("bidder", DataType::Int64, false),
        Field::new("url", DataType::Utf8, false),
        Field::new("price", DataType::Int64, false),
    ]))
}

/// 1000 rows of every column, then projected to `columns` as a source
/// reading only those would give them.
fn rows(columns: &[usize]) -> InputBatches {
    let n = 1000i64;
    let full = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 7))),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("u{i}")),
            )),
            Arc::new(Int64Array::from_iter_values((0..n).map(|i| i * 10))),
        ],
    )
    .unwrap();
    let batch = full.project(columns).unwrap();
    Box::pin(futures::stream::iter([Ok(batch)]))
}

/// Runs `sql`, returning its output and the columns its input was opened for.
async fn run_noting(sql: &str) -> (Vec<RecordBatch>, Vec<usize>) {
    let opened = Arc::new(Mutex::new(None));
    let noted = opened.clone();
    let input = TaskInput::new(move |columns| {
        *noted.lock().unwrap() = Some(columns.to_vec());
        rows(columns)
    });
    let mut out = run(sql, schema(), input, &[], BUDGET).await.unwrap();
    let mut batches = Vec::new();
    while let Some(b) = out.next().await {
        batches.push(b.unwrap());
    }
    out.read_rest().await.unwrap();
    let columns = opened
        .lock()
        .unwrap()
        .clone()
        .expect("the input was opened");
    (batches, columns)
}

/// The same query over every column, unprojected.
async fn run_unprojected(sql: &str) -> Vec<RecordBatch> {
    let all: Vec<usize> = (0..schema().fields().len()).collect();
    let mut out = run(sql, schema(), rows(&all), &[], BUDGET).await.unwrap();
    let mut batches = Vec::new();
    while let Some(b) = out.next().await {
        batches.push(b.unwrap());
    }
    batches
}

#[tokio::test]
async fn the_input_is_opened_for_the_columns_the_plan_reads() {
    for (sql, want) in [
        (
            "SELECT auction, price FROM input WHERE auction % 123 = 0",
            vec![0, 3],
        ),
        ("SELECT * FROM input", vec![0, 1, 2, 3]),
        (
            "SELECT bidder, count(*) AS n FROM input GROUP BY bidder",
            vec![1],
        ),
        ("SELECT count(*) AS n FROM input", vec![]),
        (
            "SELECT a.auction, b.url FROM input a JOIN input b ON a.auction = b.auction",
            vec![0, 2],
        ),
    ] {
        let (projected, columns) = run_noting(sql).await;
        assert_eq!(columns, want, "{sql}");
        assert_eq!(projected, run_unprojected(sql).await, "{sql}");
        assert!(!projected.is_empty(), "{sql}");
    }
}

#[tokio::test]
async fn a_plan_that_reads_no_rows_still_opens_its_input() {
    let (out, columns) = run_noting("SELECT auction FROM input WHERE false").await;
    assert!(out.iter().all(|b| b.num_rows() == 0));
    // The scan of `auction` stays in the plan, under a filter never true.
    assert_eq!(columns, [0]);
}

#[tokio::test]
async fn a_scan_that_needs_a_column_the_input_lacks_fails_by_name() {
    let input = TaskInput::new(|_| rows(&[0]));
    let mut out = run("SELECT url FROM input", schema(), input, &[], BUDGET)
        .await
        .unwrap();
    let err = out.next().await.unwrap().unwrap_err().to_string();
    assert!(err.contains("\"url\""), "{err}");
}

/// Runs `sql`, returning the filter its input was opened with.
async fn filter_of(sql: &str) -> Option<crate::RowFilter> {
    let (filter, ran) = try_filter_of(sql).await;
    ran.unwrap();
    filter
}

/// Runs `sql`: the filter its input was opened with, and how the run ended.
async fn try_filter_of(sql: &str) -> (Option<crate::RowFilter>, Result<(), crate::SqlError>) {
    let noted = Arc::new(Mutex::new(None));
    let note = noted.clone();
    let input = TaskInput::filtered(move |columns, filter| {
        *note.lock().unwrap() = Some(filter);
        rows(columns)
    });
    let mut out = run(sql, schema(), input, &[], BUDGET).await.unwrap();
    let mut ran = Ok(());
    while let Some(b) = out.next().await {
        if let Err(e) = b {
            ran = Err(e);
            break;
        }
    }
    let filter = noted.lock().unwrap().take();
    (filter.expect("the input was opened"), ran)
}

#[tokio::test]
async fn a_where_on_the_stream_is_handed_to_its_source_conjunct_by_conjunct() {
    let filter =
        filter_of("SELECT auction, price FROM input WHERE auction % 123 = 0 AND price > 100")
            .await
            .expect("a filter");
    let conjuncts = filter.conjuncts();
    assert_eq!(conjuncts.len(), 2);
    assert_eq!(conjuncts[0].columns(), ["auction"]);
    assert_eq!(conjuncts[1].columns(), ["price"]);
    let all: Vec<usize> = (0..4).collect();
    let batch = futures::executor::block_on(futures::StreamExt::next(&mut rows(&all)))
        .unwrap()
        .unwrap();
    let keep = conjuncts[0].keeps(&batch).expect("evaluated");
    let kept: Vec<usize> = (0..batch.num_rows()).filter(|&i| keep.value(i)).collect();
    let want: Vec<usize> = (0..1000).filter(|i| i % 123 == 0).collect();
    assert_eq!(kept, want);
}

#[tokio::test]
async fn a_conjunct_that_fails_on_a_row_keeps_every_row_for_the_plan_to_decide() {
    // bidder / auction divides by zero on the row whose auction is 0.
    let sql = "SELECT auction FROM input WHERE auction > 0 AND bidder / auction >= 0";
    let (filter, ran) = try_filter_of(sql).await;
    let filter = filter.expect("a filter");
    // The plan evaluates the whole conjunction, as the source does.
    assert!(ran.unwrap_err().to_string().contains("Divide by zero"));
    let all: Vec<usize> = (0..4).collect();
    let batch = futures::executor::block_on(futures::StreamExt::next(&mut rows(&all)))
        .unwrap()
        .unwrap();
    let failing = filter
        .conjuncts()
        .iter()
        .find(|c| c.columns() == ["auction", "bidder"])
        .expect("the division's conjunct");
    assert!(failing.keeps(&batch).is_none());
}

#[tokio::test]
async fn no_filter_is_handed_over_for_a_stream_scanned_twice_or_without_a_where() {
    assert!(filter_of("SELECT * FROM input").await.is_none());
    let self_join = "SELECT a.auction FROM input a JOIN input b ON a.auction = b.auction \
                     WHERE a.price > 5";
    assert!(filter_of(self_join).await.is_none());
}
