//! A join of two streams, run the way the stages of a batch run it: each
//! side's rows from a task reading its stream, matched in pieces (new rows
//! of one side against all of the other's), the joined rows through the
//! rest of the query; the outcome equals DataFusion's join over all the
//! rows at once, and the unmatched rows of an outer side, padded, are the
//! outer join's extra rows.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use crate::guard::DEFAULT_BUDGET as BUDGET;
use crate::{Bound, InputBatches, StreamJoin, Streams, check};

/// `o` (orders) and `p` (payments): a key, an event time, a label.
fn schema(stream: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new(format!("{stream}_label"), DataType::Utf8, false),
    ]))
}

/// `o` has keys 0..40 at 1 s apart; `p` keys 0..60 step 2, at 1.5 s apart
/// (so some pairs fall outside a 10 s bound), and a null key.
fn rows(stream: &str) -> RecordBatch {
    let (keys, step): (Vec<Option<i64>>, i64) = match stream {
        "o" => ((0..40).map(Some).collect(), 1000),
        _ => ((0..60).step_by(2).map(Some).chain([None]).collect(), 1500),
    };
    let ts = TimestampMillisecondArray::from(
        (0..keys.len() as i64).map(|i| i * step).collect::<Vec<_>>(),
    );
    let labels: StringArray = (0..keys.len())
        .map(|i| Some(format!("{stream}{i}")))
        .collect();
    RecordBatch::try_new(
        schema(stream),
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(ts),
            Arc::new(labels),
        ],
    )
    .unwrap()
}

fn tables() -> Vec<(String, SchemaRef)> {
    ["o", "p"].map(|s| (s.to_owned(), schema(s))).to_vec()
}

fn input(stream: &str) -> InputBatches {
    Box::pin(futures::stream::iter([Ok(rows(stream))]))
}

const INNER: &str = "SELECT o.k, o.o_label, p.p_label FROM o JOIN p ON o.k = p.k \
     AND p.ts BETWEEN o.ts - INTERVAL '2 seconds' AND o.ts + INTERVAL '10 seconds' WHERE o.k <> 4";
const LEFT: &str = "SELECT o.k, o.o_label, p.p_label FROM o LEFT JOIN p ON o.k = p.k \
     AND p.ts >= o.ts AND p.ts <= o.ts + INTERVAL '10 seconds'";

/// Each row as text, sorted.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let options = datafusion::arrow::util::display::FormatOptions::default().with_null("null");
    let mut out = Vec::new();
    for b in batches {
        let f: Vec<_> = b
            .columns()
            .iter()
            .map(|c| {
                datafusion::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options)
                    .unwrap()
            })
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                f.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

async fn at_once(sql: &str) -> Vec<String> {
    let ctx = SessionContext::new();
    for s in ["o", "p"] {
        let t = MemTable::try_new(schema(s), vec![vec![rows(s)]]).unwrap();
        ctx.register_table(s, Arc::new(t)).unwrap();
    }
    lines(&ctx.sql(sql).await.unwrap().collect().await.unwrap())
}

async fn plan(sql: &str, reading: &str) -> StreamJoin {
    let streams = Streams {
        tables: tables(),
        reading: reading.into(),
    };
    StreamJoin::plan(sql, streams, input(reading), &[], BUDGET)
        .await
        .unwrap()
        .expect("a join of two streams")
}

/// Side `side`'s rows, as a task reading its stream makes them, with ids
/// from `first`.
async fn side(sql: &str, side: usize, first: u64) -> RecordBatch {
    let join = plan(sql, ["o", "p"][side]).await;
    assert_eq!(join.sides(), &["o".to_string(), "p".to_string()]);
    let mut out = join.map(side).unwrap();
    let mut all = Vec::new();
    while let Some(b) = out.next().await {
        all.push(b.unwrap());
    }
    out.read_rest().await.unwrap();
    let rows = datafusion::arrow::compute::concat_batches(&join.side_schema(side), &all).unwrap();
    let ids: UInt64Array = (first..first + rows.num_rows() as u64).collect();
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(ids));
    let mut fields: Vec<Field> = rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(crate::JOIN_ID, DataType::UInt64, false));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[tokio::test]
async fn the_driver_learns_the_streams_the_outer_sides_and_the_bound() {
    let checked = check(INNER, &tables(), &[], BUDGET).await.unwrap();
    let info = checked.join.expect("a stream join");
    assert_eq!(info.streams, ["o".to_string(), "p".to_string()]);
    assert_eq!(info.outer, [false, false]);
    let (bound, columns) = info.bound.expect("a bound");
    assert_eq!(columns, ["ts".to_string(), "ts".to_string()]);
    assert_eq!(
        (bound.lower_ms, bound.upper_ms),
        (Some(-2000), Some(10_000))
    );
    let left = check(LEFT, &tables(), &[], BUDGET)
        .await
        .unwrap()
        .join
        .unwrap();
    assert_eq!(left.outer, [true, false]);
    assert_eq!(
        left.bound.map(|(b, _)| (b.lower_ms, b.upper_ms)),
        Some((Some(0), Some(10_000)))
    );
    let open = "SELECT o.k FROM o JOIN p ON o.k = p.k";
    let none = check(open, &tables(), &[], BUDGET)
        .await
        .unwrap()
        .join
        .unwrap();
    assert_eq!(none.bound, None);
}

#[tokio::test]
async fn matching_in_pieces_equals_the_join_at_once() {
    let (o, p) = (side(INNER, 0, 0).await, side(INNER, 1, 1000).await);
    let join = plan(INNER, "o").await;
    // Two batches: the first halves, then the rest against everything.
    let (o1, o2) = (o.slice(0, 20), o.slice(20, o.num_rows() - 20));
    let (p1, p2) = (p.slice(0, 10), p.slice(10, p.num_rows() - 10));
    let first = join
        .matches(vec![o1.clone()], vec![p1.clone()])
        .await
        .unwrap();
    let new_left = join
        .matches(vec![o2.clone()], vec![p1, p2.clone()])
        .await
        .unwrap();
    let old_left = join.matches(vec![o1], vec![p2]).await.unwrap();
    let mut out = Vec::new();
    for m in [first, new_left, old_left] {
        assert_eq!(m.left_ids.len(), m.right_ids.len());
        out.extend(join.finish(m.joined).await.unwrap());
    }
    let want = at_once(INNER).await;
    assert!(!want.is_empty());
    assert_eq!(lines(&out), want);
}

#[tokio::test]
async fn unmatched_rows_of_the_outer_side_padded_are_the_outer_joins_extra_rows() {
    let (o, p) = (side(LEFT, 0, 0).await, side(LEFT, 1, 1000).await);
    let join = plan(LEFT, "o").await;
    assert_eq!(join.outer(), [true, false]);
    let m = join.matches(vec![o.clone()], vec![p]).await.unwrap();
    let matched: std::collections::BTreeSet<u64> = m.left_ids.iter().copied().collect();
    let keep: arrow_array::BooleanArray = (0..o.num_rows() as u64)
        .map(|i| Some(!matched.contains(&i)))
        .collect();
    let unmatched = datafusion::arrow::compute::filter_record_batch(&o, &keep).unwrap();
    let width = join.side_schema(0).fields().len();
    let unmatched = unmatched.project(&(0..width).collect::<Vec<_>>()).unwrap();
    let mut out = join.finish(m.joined).await.unwrap();
    out.extend(
        join.finish(vec![join.padded(0, &unmatched).unwrap()])
            .await
            .unwrap(),
    );
    assert_eq!(lines(&out), at_once(LEFT).await);
    assert_eq!(
        join.bound(),
        Some(Bound {
            left: 1,
            right: 1,
            lower_ms: Some(0),
            upper_ms: Some(10_000)
        })
    );
}
