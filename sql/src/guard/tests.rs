//! The planning bounds: what they refuse, naming the limit, what they let
//! through, and that planning leaves the caller's thread free.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow_array::{Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::*;
use crate::{InputBatches, check, run};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "value",
        DataType::UInt64,
        false,
    )]))
}

/// The one stream table `input`, of [`schema`].
fn streams() -> [(String, SchemaRef); 1] {
    [(crate::INPUT.to_owned(), schema())]
}

fn input(values: Vec<u64>) -> InputBatches {
    let values: UInt64Array = values.into_iter().collect();
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(values)]).unwrap();
    Box::pin(futures::stream::iter([Ok(batch)]))
}

/// `SELECT value + 1 + … + 1`: `terms` additions, an expression
/// `terms + 1` levels deep.
fn plus_chain(terms: usize) -> String {
    format!("SELECT value{} AS v FROM input", " + 1".repeat(terms))
}

/// `WHERE value = 0 OR value = 1 OR …`: `terms` equalities.
fn or_chain(terms: usize) -> String {
    let ors: Vec<String> = (0..terms).map(|i| format!("value = {i}")).collect();
    format!("SELECT value FROM input WHERE {}", ors.join(" OR "))
}

fn wide(columns: usize) -> String {
    let cols: Vec<String> = (0..columns).map(|i| format!("value AS c{i}")).collect();
    format!("SELECT {} FROM input", cols.join(", "))
}

#[tokio::test]
async fn operator_chains_past_the_depth_limit_are_refused_naming_it() {
    for sql in [plus_chain(2_500), or_chain(2_500), plus_chain(MAX_DEPTH)] {
        let e = check(&sql, &streams(), &[], DEFAULT_BUDGET)
            .await
            .expect_err("a chain past the limit was accepted");
        assert!(matches!(e, SqlError::TooLarge(_)), "{e:?}");
        assert!(
            e.to_string().contains("nest deeper than 1000 levels"),
            "{e}"
        );
    }
}

#[tokio::test]
async fn a_chain_at_the_depth_limit_plans_and_runs() {
    // A debug build takes seconds to plan this deep: the budget is not
    // what this test is about.
    let generous = Duration::from_secs(300);
    let terms = MAX_DEPTH - 1;
    let mut out = run(
        &plus_chain(terms),
        schema(),
        input(vec![0, 5]),
        &[],
        generous,
    )
    .await
    .unwrap();
    // Run as an executor runs a task: on a thread of RUN_STACK_BYTES.
    let values = std::thread::Builder::new()
        .stack_size(RUN_STACK_BYTES)
        .spawn(move || {
            let mut values = Vec::new();
            while let Some(b) = futures::executor::block_on(out.next()) {
                let b = b.unwrap();
                let col = arrow_cast::cast(b.column(0), &DataType::UInt64).unwrap();
                let col = col.as_any().downcast_ref::<UInt64Array>().unwrap();
                values.extend(col.values().iter().copied());
            }
            values
        })
        .unwrap()
        .join()
        .unwrap();
    let t = terms as u64;
    assert_eq!(values, vec![t, 5 + t]);
    let ors = check(&or_chain(MAX_DEPTH / 2), &streams(), &[], generous).await;
    assert!(ors.is_ok(), "{ors:?}");
}

#[tokio::test]
async fn a_query_past_the_token_limit_is_refused_naming_it() {
    let sql = format!("SELECT value{} FROM input", ", 1".repeat(MAX_TOKENS / 2));
    let e = check(&sql, &streams(), &[], DEFAULT_BUDGET)
        .await
        .expect_err("a query past the token limit was accepted");
    assert!(matches!(e, SqlError::TooLarge(_)), "{e:?}");
    assert!(e.to_string().contains("Sluice plans at most 100000"), "{e}");
}

#[tokio::test]
async fn planning_past_its_budget_is_refused_naming_the_budget() {
    let budget = Duration::from_millis(1);
    let e = check(&wide(3_000), &streams(), &[], budget)
        .await
        .expect_err("a 3,000-column plan fit in 1 ms");
    assert!(matches!(e, SqlError::TooLarge(_)), "{e:?}");
    assert!(e.to_string().contains("planning budget of 1ms"), "{e}");
}

#[tokio::test]
async fn planning_leaves_the_callers_thread_free() {
    // A current-thread runtime: a task spawned beside the check runs only
    // if planning does not hold the thread.
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let beside = tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let checked = check(&wide(2_000), &streams(), &[], DEFAULT_BUDGET).await;
    assert!(checked.is_ok(), "{checked:?}");
    assert!(
        ran.load(Ordering::SeqCst),
        "the task beside the check did not run while it planned"
    );
    beside.await.unwrap();
}
