//! Where a column fed by another operator comes from: whether it is the
//! end (or later) of the window of the aggregation that feeds it, so that
//! the watermark bounds it as it bounds a stream's event time.
//!
//! ```text
//!  join side:  wend = date_bin(2 s, ts) + 2 s   ◄─ Projection ◄─ aggregate GROUP BY date_bin(2 s, ts)
//!              the window's start + 2 s = its end ─► a later batch's rows have wend past the watermark
//! ```
//!
//! An aggregation that feeds another operator emits a window only once
//! the watermark has passed its end (see `docs/design-notes.md`, chains),
//! so every row it emits in a later batch has an end past this batch's
//! watermark: such a column closes with the watermark, exactly as an event
//! time column of a stream with a watermark does.

use std::sync::Arc;

use datafusion::logical_expr::Operator;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};

use crate::graph::{Graph, Kind, Source};
use crate::stateful::{Aggregation, WindowEnd};

/// Whether column `column` of side `side` of `graph`'s operator `op` is
/// at least the end of the window of the aggregation feeding that side.
pub(crate) fn window_end_or_later(graph: &Graph, op: usize, side: usize, column: usize) -> bool {
    let Some(Source::Operator(j)) = graph.sources(op).get(side).cloned() else {
        return false;
    };
    if graph.kind(j) != Kind::Aggregate {
        return false;
    }
    let Some((key, end)) = Aggregation::of(graph, j).ok().and_then(|a| a.window()) else {
        return false;
    };
    let Some(traced) = trace(graph.side_plan(op, side), graph.node(j), column) else {
        return false;
    };
    traced.column == key
        && match end {
            WindowEnd::Plus(stride) => !traced.end_field && traced.offset >= stride,
            WindowEnd::Field => traced.end_field && traced.offset >= 0,
        }
}

/// A column of the upstream node's output, read as its `end` field (of a
/// window struct) or as itself, plus a constant in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Traced {
    column: usize,
    end_field: bool,
    offset: i64,
}

/// Column `column` of `plan`'s output, traced down to `upstream`'s output
/// through projections, filters and nodes that pass their rows through.
fn trace(
    mut plan: Arc<dyn ExecutionPlan>,
    upstream: &Arc<dyn ExecutionPlan>,
    column: usize,
) -> Option<Traced> {
    let mut at = Traced {
        column,
        end_field: false,
        offset: 0,
    };
    while !Arc::ptr_eq(&plan, upstream) {
        let next = if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
            let inner = expr(&p.expr().get(at.column)?.expr)?;
            if inner.end_field && at.end_field {
                return None;
            }
            at = Traced {
                column: inner.column,
                end_field: inner.end_field || at.end_field,
                offset: inner.offset.checked_add(at.offset)?,
            };
            p.input().clone()
        } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
            if let Some(p) = f.projection() {
                at.column = *p.get(at.column)?;
            }
            f.input().clone()
        } else {
            let children = plan.children();
            let [child] = children.as_slice() else {
                return None;
            };
            if child.schema() != plan.schema() {
                return None;
            }
            (*child).clone()
        };
        plan = next;
    }
    Some(at)
}

/// `e` as a column of its input: `col`, `CAST(col)`, `col ± INTERVAL`,
/// `get_field(col, 'end')`.
fn expr(e: &Arc<dyn PhysicalExpr>) -> Option<Traced> {
    if let Some(c) = e.downcast_ref::<Column>() {
        return Some(Traced {
            column: c.index(),
            end_field: false,
            offset: 0,
        });
    }
    if let Some(c) = e.downcast_ref::<CastExpr>() {
        return expr(c.expr());
    }
    if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
        let [inner, name] = f.args() else { return None };
        let name = name.downcast_ref::<Literal>()?.value().to_string();
        if f.name() != "get_field" || name != "end" {
            return None;
        }
        let inner = expr(inner)?;
        return (!inner.end_field).then_some(Traced {
            end_field: true,
            ..inner
        });
    }
    let b = e.downcast_ref::<BinaryExpr>()?;
    let constant =
        |e: &Arc<dyn PhysicalExpr>| crate::bound::interval_ms(e.downcast_ref::<Literal>()?.value());
    match *b.op() {
        Operator::Plus => match (expr(b.left()), constant(b.right())) {
            (Some(t), Some(ms)) => Some(Traced {
                offset: t.offset.checked_add(ms)?,
                ..t
            }),
            _ => {
                let t = expr(b.right())?;
                let ms = constant(b.left())?;
                Some(Traced {
                    offset: t.offset.checked_add(ms)?,
                    ..t
                })
            }
        },
        Operator::Minus => {
            let t = expr(b.left())?;
            let ms = constant(b.right())?;
            Some(Traced {
                offset: t.offset.checked_sub(ms)?,
                ..t
            })
        }
        _ => None,
    }
}
