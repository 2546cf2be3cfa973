//! What a query may do, checked on its logical plan before it
//! runs. Anything else is refused by name: no query may silently run with
//! different semantics than its SQL says.
//!
//! A query reads stream tables (by name, see [`crate::Streams`]) and
//! static tables; each task reads one stream, the others being empty for
//! it, so a query must be linear in each stream.
//!
//! - One aggregation over the streams (`GROUP BY`, `SELECT DISTINCT`) is
//!   a stateful query; its aggregate functions are those whose state
//!   merges exactly, and every stream is read beneath it.
//! - So is one top-N over the streams: `ROW_NUMBER() OVER (PARTITION BY
//!   .. ORDER BY ..)`, filtered by its rank (see [`crate::top_n`]). Other
//!   window functions (`OVER`) are refused.
//! - Every stream is read exactly once: a query that reads one twice (a
//!   self-join, say) or never is refused, and so is a join of two streams
//!   (see [`joins`]).
//! - Refused outright: `ORDER BY` and `LIMIT` (a stream has no order and
//!   no end), functions whose value is not fixed by their arguments
//!   (`now()`, `random()`, `uuid()`: a retried task must write the same
//!   bytes), recursive queries, `EXPLAIN`, and joins that would emit a
//!   static table's unmatched rows with every batch.

mod joins;
mod windows;

use std::collections::BTreeSet;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, Volatility};

use crate::{INPUT, SqlError};
use windows::{
    calls_session, is_session, session_outside_group_by, session_refused, window_column,
};

/// The aggregate functions whose state merges exactly across batches.
const AGGREGATES: [&str; 6] = ["count", "sum", "min", "max", "avg", "approx_distinct"];

/// The names of the streams a plan reads, sorted.
pub type Reads = BTreeSet<String>;

/// What the checked query keeps between batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The grouping key of the query's aggregation over the streams (every
    /// column of a `SELECT DISTINCT`); `None` for a stateless query.
    pub keys: Option<Vec<String>>,
    /// The column whose event-time window (`window`, `hop`, `date_bin`)
    /// the aggregation groups by, if it does.
    pub window: Option<String>,
    /// Whether the query joins two streams (its one stateful operator).
    pub join: bool,
    /// Whether the query keeps the top N rows of each group (its one
    /// stateful operator).
    pub top_n: bool,
}

/// Refuses the first construct of `plan`, a query over the stream tables
/// `streams`, that Sluice does not run.
pub fn check(plan: &LogicalPlan, streams: &[String]) -> Result<Shape, SqlError> {
    let mut walk = Walk {
        streams,
        refused: None,
        reads: vec![0; streams.len()],
        aggregations: Vec::new(),
        joins: Vec::new(),
        top_ns: Vec::new(),
        window: None,
    };
    plan.apply_with_subqueries(|node| {
        walk.refused = walk.visit(node)?;
        Ok(match walk.refused {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })
    .map_err(SqlError::from_planning)?;
    walk.finish()
}

/// What a walk over a plan has found so far.
struct Walk<'a> {
    streams: &'a [String],
    refused: Option<SqlError>,
    /// How many times the plan reads each of `streams`.
    reads: Vec<usize>,
    /// The aggregations over streams: their keys, and the streams beneath.
    aggregations: Vec<(Vec<String>, Reads)>,
    /// The joins of two streams: the two streams.
    joins: Vec<Reads>,
    /// The top-Ns over streams: the streams beneath.
    top_ns: Vec<Reads>,
    window: Option<String>,
}

impl Walk<'_> {
    /// The refusal of `node`, if it is refused; records its reads and
    /// aggregations.
    fn visit(&mut self, node: &LogicalPlan) -> datafusion::common::Result<Option<SqlError>> {
        if let Some(refused) = construct(node)? {
            return Ok(Some(refused));
        }
        if let Some(refused) = session_outside_group_by(node)? {
            return Ok(Some(refused));
        }
        let sides = joins::join_sides(node, self.streams)?;
        if let Some(refused) = sides.iter().find_map(joins::refusal) {
            return Ok(Some(refused));
        }
        for s in sides.iter().filter(|s| joins::is_stream_join(s)) {
            self.joins.push(s.left.union(&s.right).cloned().collect());
        }
        Ok(match node {
            LogicalPlan::Union(u) => u
                .inputs
                .iter()
                .any(|i| self.read_by(i).is_empty())
                .then(|| {
                    unsupported(
                        "a UNION branch that reads no stream",
                        "every task would emit its rows again; each branch of a UNION must read a stream",
                    )
                }),
            LogicalPlan::Aggregate(a) => self.aggregate(a)?,
            LogicalPlan::Window(w) => self.top_n(w)?,
            LogicalPlan::Distinct(d) => {
                let beneath = self.read_by(node);
                if !beneath.is_empty() {
                    let schema = d.input().schema();
                    let keys = schema.fields().iter().map(|f| f.name().clone());
                    self.aggregations.push((keys.collect(), beneath));
                }
                None
            }
            LogicalPlan::TableScan(t) => {
                if let Some(i) = self.streams.iter().position(|s| *s == t.table_name.table()) {
                    self.reads[i] += 1;
                }
                None
            }
            _ => None,
        })
    }

    /// Records `a` if it aggregates streams, and refuses what a streaming
    /// aggregation cannot keep.
    fn aggregate(&mut self, a: &Aggregate) -> datafusion::common::Result<Option<SqlError>> {
        let beneath = self.read_by(&a.input);
        if beneath.is_empty() {
            return Ok(calls_session(&a.group_expr)?.then(session_refused));
        }
        let keys = a.group_expr.iter().map(|e| e.schema_name().to_string());
        self.aggregations.push((keys.collect(), beneath));
        if self.aggregations.len() + self.top_ns.len() == 1 {
            self.window = a.group_expr.iter().find_map(window_column);
        }
        let windows = a.group_expr.iter().filter(|e| window_column(e).is_some());
        let sessions = a.group_expr.iter().filter(|e| is_session(e));
        if sessions.count() > 0 && windows.count() > 1 {
            return Ok(Some(unsupported(
                "session_window with another window in one GROUP BY",
                "a group's rows are in one session; group by session_window(ts, gap) and the other keys",
            )));
        }
        if a.group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return Ok(Some(unsupported(
                "GROUPING SETS, CUBE or ROLLUP",
                "a streaming aggregation keeps one grouping",
            )));
        }
        aggregate_functions(&a.aggr_expr)
    }

    /// Records `w` if it is a top-N over streams; refuses any other use
    /// of `OVER`.
    fn top_n(
        &mut self,
        w: &datafusion::logical_expr::Window,
    ) -> datafusion::common::Result<Option<SqlError>> {
        let beneath = self.read_by(&w.input);
        let refused = || -> datafusion::common::Result<Option<SqlError>> {
            let names = function_names(&w.window_expr)?;
            Ok(Some(unsupported(
                format!("the window function {}", names.join(", ")),
                "over a stream, OVER runs only as a top-N: ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..) filtered by `rn <= N`; use GROUP BY window(...) for event-time windows",
            )))
        };
        let [Expr::WindowFunction(f)] = w.window_expr.as_slice() else {
            return refused();
        };
        let p = &f.params;
        if beneath.is_empty()
            || f.fun.name() != "row_number"
            || p.partition_by.is_empty()
            || p.order_by.is_empty()
        {
            return refused();
        }
        self.top_ns.push(beneath);
        if self.aggregations.len() + self.top_ns.len() == 1 {
            self.window = p.partition_by.iter().find_map(window_column);
        }
        Ok(None)
    }

    /// The streams that `plan` reads.
    fn read_by(&self, plan: &LogicalPlan) -> Reads {
        streams_read(plan, self.streams)
    }

    /// The shape of the walked plan, or the refusal of its reads: every
    /// stream read. How its stateful operators feed each other is checked
    /// on the physical plan (see [`crate::graph`]).
    fn finish(self) -> Result<Shape, SqlError> {
        if let Some(e) = self.refused {
            return Err(e);
        }
        if self.streams.is_empty() {
            return Err(unsupported(
                "a query without a stream",
                "a streaming query's rows come from its streams; give the query a source",
            ));
        }
        if let Some((name, _)) = self.streams.iter().zip(&self.reads).find(|(_, r)| **r == 0) {
            return Err(not_read(name, self.streams));
        }
        Ok(Shape {
            keys: self.aggregations.first().map(|(keys, _)| keys.clone()),
            window: self.window,
            join: !self.joins.is_empty(),
            top_n: !self.top_ns.is_empty(),
        })
    }
}

/// The refusal of `node` for what it is, whatever it reads.
fn construct(node: &LogicalPlan) -> datafusion::common::Result<Option<SqlError>> {
    if let Some(name) = volatile_function(node)? {
        return Ok(Some(unsupported(
            format!("the function {name}"),
            "its value depends on when or where a task runs, so a retried task would write different rows",
        )));
    }
    Ok(match node {
        LogicalPlan::Distinct(datafusion::logical_expr::Distinct::On(_)) => Some(unsupported(
            "DISTINCT ON",
            "use SELECT DISTINCT or GROUP BY",
        )),
        LogicalPlan::Sort(_) => Some(unsupported(
            "ORDER BY",
            "a stream has no order; sort the output where it is read",
        )),
        LogicalPlan::Limit(_) => Some(unsupported(
            "LIMIT",
            "a stream has no end; filter with WHERE instead",
        )),
        LogicalPlan::RecursiveQuery(_) => Some(unsupported(
            "a recursive query",
            "it cannot run over a stream",
        )),
        LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => Some(unsupported(
            "EXPLAIN",
            "a streaming query must produce rows",
        )),
        _ => None,
    })
}

/// The refusal of a query that never reads the stream `name`.
fn not_read(name: &str, streams: &[String]) -> SqlError {
    let reason = if streams == [INPUT] {
        "a streaming query's rows come from its input; select FROM input"
    } else {
        "a streaming query reads each of its streams; read every source in `sources:` or remove it"
    };
    unsupported(
        format!("a query that does not read the stream `{name}`"),
        reason,
    )
}

/// The refusal of a query that reads the stream `name` more than once.
pub(crate) fn read_twice(name: &str) -> SqlError {
    unsupported(
        format!(
            "reading the stream `{name}` more than once (a self-join, or `{name}` in a UNION or subquery twice)"
        ),
        "each batch's input is read once; join the stream with static tables instead",
    )
}

/// The first aggregate call in `exprs` whose state does not merge exactly
/// across batches, refused by name.
fn aggregate_functions(exprs: &[Expr]) -> datafusion::common::Result<Option<SqlError>> {
    let mut refused = None;
    for e in exprs {
        e.apply(|e| {
            if let Expr::AggregateFunction(f) = e {
                let name = f.func.name().to_string();
                let distinct = f.params.distinct;
                if !AGGREGATES.contains(&name.as_str()) || (distinct && name != "count") {
                    let shown = if distinct { format!("{name}(DISTINCT ...)") } else { name };
                    refused = Some(unsupported(
                        format!("the aggregate function {shown}"),
                        "a streaming aggregation keeps count, sum, min, max, avg, count(DISTINCT ...) and approx_distinct, whose state merges exactly across batches",
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
                if !f.params.order_by.is_empty() {
                    refused = Some(unsupported(
                        format!("ORDER BY in the aggregate function {name}"),
                        "a stream has no order",
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if refused.is_some() {
            break;
        }
    }
    Ok(refused)
}

/// The first function in `node`'s expressions whose result is not fixed
/// by its arguments (`now()`, `random()`, `uuid()`): a task must be a pure
/// function of its input.
fn volatile_function(node: &LogicalPlan) -> datafusion::common::Result<Option<String>> {
    let mut found = None;
    node.apply_expressions(|e| {
        e.apply(|e| {
            if let Expr::ScalarFunction(f) = e
                && f.func.signature().volatility != Volatility::Immutable
            {
                found = Some(f.func.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
    })?;
    Ok(found)
}

/// The names of the aggregate and window functions that `exprs` call.
fn function_names(exprs: &[Expr]) -> datafusion::common::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in exprs {
        e.apply(|e| {
            match e {
                Expr::AggregateFunction(f) => names.push(f.func.name().to_string()),
                Expr::WindowFunction(f) => names.push(f.fun.name().to_string()),
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    Ok(names)
}

/// The streams of `streams` that `plan` reads, with its subqueries.
pub(crate) fn streams_read(plan: &LogicalPlan, streams: &[String]) -> Reads {
    let mut found = Reads::new();
    let _ = plan.apply_with_subqueries(|n| {
        if let LogicalPlan::TableScan(t) = n
            && let Some(s) = streams.iter().find(|s| **s == t.table_name.table())
        {
            found.insert(s.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

pub(crate) fn unsupported(construct: impl Into<String>, reason: &str) -> SqlError {
    SqlError::Unsupported {
        construct: construct.into(),
        reason: reason.into(),
    }
}
