//! Event-time windows, after Spark's `window()`:
//!
//! - `window(ts, '10 seconds')`: the tumbling window that holds `ts`, a
//!   struct `{start, end}` of millisecond timestamps, aligned to the epoch.
//! - `window(ts, size, slide)` or `hop(ts, size, slide)`: sliding windows.
//!   A row is in `size / slide` of them, so in `GROUP BY` the aggregation's
//!   input is expanded first, one row per window ([`expand_sliding`]).
//!
//! Sizes are interval strings ('10 seconds', '1 minute') or intervals of
//! a fixed length (no months), read by [`millis`] and checked at submit
//! by [`crate::window_check`].

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{Array, ArrayRef, ListArray, StructArray, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    Aggregate, ColumnarValue, Expr, LogicalPlan, LogicalPlanBuilder, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

pub(crate) use crate::window_length::millis;

/// The column an expanded aggregation groups by, one window per row.
const EXPANDED: &str = "__sluice_window";

/// The type of a window: `{start, end}`.
pub fn window_type() -> DataType {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    DataType::Struct(Fields::from(vec![
        Field::new("start", ts.clone(), true),
        Field::new("end", ts, true),
    ]))
}

/// `window` and its alias `hop`, to register in a session.
pub fn functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(Window::new("window")),
        ScalarUDF::new_from_impl(Window::new("hop")),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Window {
    name: &'static str,
    signature: Signature,
    /// Every window of a row (a list), rather than the one tumbling window.
    all: bool,
    /// The task's memory pool, which each call's windows are reserved in
    /// (when `all`).
    pool: Option<Pool>,
}

impl Window {
    fn new(name: &'static str) -> Self {
        Window {
            name,
            signature: Signature::variadic_any(Volatility::Immutable),
            all: false,
            pool: None,
        }
    }

    fn expanding(pool: Arc<dyn MemoryPool>) -> Self {
        Window {
            all: true,
            pool: Some(Pool(pool)),
            ..Window::new("__sluice_windows")
        }
    }

    /// Reserves the bytes of `ts`'s sliding windows in the task's pool,
    /// before they are built: a slide far shorter than the size fails the
    /// task at its pool, naming the limit, instead of taking the
    /// executor's memory. The reservation ends with the call; the rows
    /// after it count in the pool of the aggregation they feed.
    fn reserve(
        &self,
        ts: &TimestampMillisecondArray,
        size: i64,
        slide: i64,
    ) -> Result<Option<MemoryReservation>> {
        let Some(Pool(pool)) = &self.pool else {
            return Ok(None);
        };
        let count = window_count(ts, size, slide);
        let bytes = usize::try_from(count.saturating_mul(WINDOW_BYTES)).unwrap_or(usize::MAX);
        let reservation = MemoryConsumer::new(format!(
            "{}: {count} sliding windows of {} rows",
            self.name,
            ts.len()
        ))
        .register(pool);
        reservation.try_grow(bytes)?;
        Ok(Some(reservation))
    }
}

/// The task's memory pool, in a UDF that must compare and hash: one
/// pool is equal only to itself.
#[derive(Clone)]
struct Pool(Arc<dyn MemoryPool>);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

impl PartialEq for Pool {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl Eq for Pool {}

impl std::hash::Hash for Pool {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(state);
    }
}

/// The bytes of one window as built: its start and end, 8 bytes each.
const WINDOW_BYTES: u64 = 16;

/// How many sliding windows the rows of `ts` are in: for each time `t`,
/// the starts `k * slide` in `(t - size, t]`.
pub(crate) fn window_count(ts: &TimestampMillisecondArray, size: i64, slide: i64) -> u64 {
    ts.iter()
        .flatten()
        .map(|t| {
            let last = t.div_euclid(slide);
            let before = t.saturating_sub(size).div_euclid(slide);
            u64::try_from(last - before).unwrap_or(0)
        })
        .sum()
}

impl ScalarUDFImpl for Window {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if !(2..=3).contains(&args.len()) || !matches!(args[0], DataType::Timestamp(_, _)) {
            return plan_err!(
                "{}(ts, size[, slide]) takes a timestamp and one or two interval strings, got {args:?}",
                self.name
            );
        }
        let one = window_type();
        Ok(if self.all {
            DataType::List(Arc::new(Field::new_list_field(one, true)))
        } else {
            one
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let size = millis(&args.args[1], self.name)?;
        let slide = match args.args.get(2) {
            Some(s) => millis(s, self.name)?,
            None => size,
        };
        if slide > size {
            return exec_err!(
                "{}: the slide ({slide} ms) is longer than the size ({size} ms)",
                self.name
            );
        }
        if slide != size && !self.all {
            return exec_err!(
                "{}(ts, size, slide) with a slide shorter than the size puts a row in several windows: it is supported only in GROUP BY",
                self.name
            );
        }
        let ts = args.args[0].to_array(args.number_rows)?;
        let ts = arrow_cast::cast(&ts, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let ts = ts.as_primitive::<TimestampMillisecondType>();
        let out: ArrayRef = if self.all {
            let _reserved = self.reserve(ts, size, slide)?;
            Arc::new(all_windows(ts, size, slide)?)
        } else {
            let starts: TimestampMillisecondArray = ts
                .iter()
                .map(|t| t.map(|t| t - t.rem_euclid(size)))
                .collect();
            Arc::new(windows(starts, size)?)
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// Each window start with its end, as window structs.
pub(crate) fn windows(starts: TimestampMillisecondArray, size: i64) -> Result<StructArray> {
    let ends: TimestampMillisecondArray = starts.iter().map(|s| s.map(|s| s + size)).collect();
    let DataType::Struct(fields) = window_type() else {
        unreachable!("a window is a struct")
    };
    let nulls = starts.nulls().cloned();
    Ok(StructArray::try_new(
        fields,
        vec![Arc::new(starts), Arc::new(ends)],
        nulls,
    )?)
}

/// Every sliding window of each row: the starts `k * slide` with
/// `start <= ts < start + size`, oldest first.
fn all_windows(ts: &TimestampMillisecondArray, size: i64, slide: i64) -> Result<ListArray> {
    let mut starts = Vec::new();
    let mut offsets = vec![0i32];
    for t in ts.iter() {
        if let Some(t) = t {
            let last = t - t.rem_euclid(slide);
            let mut first = last;
            while first - slide > t - size {
                first -= slide;
            }
            let mut s = first;
            while s <= last {
                starts.push(s);
                s += slide;
            }
        }
        offsets.push(i32::try_from(starts.len()).map_err(|_| {
            datafusion::error::DataFusionError::Execution("too many windows in one batch".into())
        })?);
    }
    let values = windows(TimestampMillisecondArray::from(starts), size)?;
    let field = Arc::new(Field::new_list_field(window_type(), true));
    Ok(ListArray::try_new(
        field,
        datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
        Arc::new(values),
        ts.nulls().cloned(),
    )?)
}

/// Rewrites each aggregation that groups by a sliding window: its input
/// gains a column of the row's windows, unnested (one row per window),
/// and the aggregation groups by that column under the window call's
/// name, so the rest of the plan reads it unchanged.
pub fn expand_sliding(plan: LogicalPlan, pool: Arc<dyn MemoryPool>) -> Result<LogicalPlan> {
    plan.transform_up(|node| {
        let LogicalPlan::Aggregate(agg) = &node else {
            return Ok(Transformed::no(node));
        };
        let Some(call) = agg.group_expr.iter().find_map(sliding) else {
            return Ok(Transformed::no(node));
        };
        let input = agg.input.as_ref().clone();
        let mut columns: Vec<Expr> = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let expand =
            ScalarUDF::new_from_impl(Window::expanding(pool.clone())).call(call.args.clone());
        columns.push(expand.alias(EXPANDED));
        let expanded = LogicalPlanBuilder::from(input)
            .project(columns)?
            .unnest_column(EXPANDED)?
            .build()?;
        let target = Expr::ScalarFunction(call.clone());
        let group: Vec<Expr> = agg
            .group_expr
            .iter()
            .map(|e| {
                if *e == target {
                    datafusion::prelude::col(EXPANDED).alias(e.schema_name().to_string())
                } else {
                    e.clone()
                }
            })
            .collect();
        let rewritten = Aggregate::try_new(Arc::new(expanded), group, agg.aggr_expr.clone())?;
        Ok(Transformed::yes(LogicalPlan::Aggregate(rewritten)))
    })
    .map(|t| t.data)
}

/// A `window`/`hop` call with a slide shorter than its size.
fn sliding(e: &Expr) -> Option<ScalarFunction> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    if !matches!(f.func.name(), "window" | "hop") || f.args.len() != 3 {
        return None;
    }
    let size = literal_millis(&f.args[1])?;
    let slide = literal_millis(&f.args[2])?;
    (slide < size).then(|| f.clone())
}

fn literal_millis(e: &Expr) -> Option<i64> {
    let Expr::Literal(v, _) = e else { return None };
    millis(&ColumnarValue::Scalar(v.clone()), "window").ok()
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
