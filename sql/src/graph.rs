//! A query's stateful operators, found in its physical plan: aggregations,
//! joins of two streams and top-Ns, in a chain or a tree, each fed by
//! streams or by the operator below it.
//!
//! ```text
//!  root ─► [SELECT ..] ─► op 2 (join) ─┬─ side 0 ◄─ [..] ◄─ stream bid         (a map task's rows)
//!                                      └─ side 1 ◄─ [..] ◄─ op 1 (aggregate)   (op 1's reduce output)
//!                                                             └─ side 0 ◄─ [..] ◄─ op 0 ◄─ ..
//! ```
//!
//! Operators are numbered in post-order: an operator's inputs come from
//! lower numbers, and the last one feeds the query's output. Each side of
//! an operator is a plan fragment (the Partial aggregate of an
//! aggregation, a join's input, a top-N's input below its sort) over
//! either streams only, or exactly one operator's output and nothing else.
//! A map task runs the fragments over streams; an operator's reduce task
//! runs its output through the fragment it feeds (its consumer's side, or
//! the rest of the query).
//!
//! Invariant: the graph is a pure function of the physical plan, which is
//! a pure function of the SQL and the schemas; the driver and every
//! executor number the operators alike.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};

use crate::{Planned, SqlError};

/// The fragment that makes an aggregation's partial rows: the Partial
/// node beneath the Final `agg`, or a Partial over a Single's input.
pub(crate) fn partial_of(agg: &AggregateExec) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
    let raw = match agg.mode() {
        AggregateMode::Single | AggregateMode::SinglePartitioned => agg,
        _ => partial_beneath(agg).ok_or_else(|| {
            unsupported(
                format!("an aggregation in mode {:?}", agg.mode()),
                "Sluice cannot split it into map and reduce stages",
            )
        })?,
    };
    let partial = AggregateExec::try_new(
        AggregateMode::Partial,
        raw.group_expr().clone(),
        raw.aggr_expr().to_vec(),
        raw.filter_expr().to_vec(),
        raw.input().clone(),
        raw.input_schema(),
    )
    .map_err(SqlError::from_planning)?;
    Ok(Arc::new(partial))
}

/// The Partial aggregation that the Final `agg` merges: its input, or the
/// input of the `CoalescePartitionsExec` that gathers the partitions of a
/// `UNION` of streams.
pub(crate) fn partial_beneath(agg: &AggregateExec) -> Option<&AggregateExec> {
    let mut node = agg.input();
    if let Some(c) = node.downcast_ref::<CoalescePartitionsExec>() {
        node = c.input();
    }
    node.downcast_ref::<AggregateExec>()
        .filter(|p| *p.mode() == AggregateMode::Partial)
}

/// What an operator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Aggregate,
    Join,
    TopN,
}

impl Kind {
    /// The operator's state directory under `state/`, for the first
    /// operator of this kind.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Aggregate => "aggregate",
            Kind::Join => "join",
            Kind::TopN => "top_n",
        }
    }
}

/// Where a side of an operator reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The streams its fragment reads (a map task's rows).
    Streams(Vec<String>),
    /// The output of the operator numbered so.
    Operator(usize),
}

/// One side of an operator: the fragment that makes its rows, and what
/// the fragment reads.
#[derive(Debug)]
pub(crate) struct Side {
    pub plan: Arc<dyn ExecutionPlan>,
    pub source: Source,
}

/// One stateful operator of a plan.
#[derive(Debug)]
pub(crate) struct Op {
    pub kind: Kind,
    /// The operator's node in the plan (an aggregation's Final or Single
    /// node, the join, the window node).
    pub node: Arc<dyn ExecutionPlan>,
    pub sides: Vec<Side>,
    /// The operator and side its output feeds; `None`: the query's output.
    pub consumer: Option<(usize, usize)>,
}

/// The stateful operators of `planned`, in post-order.
pub(crate) fn operators(planned: &Planned) -> Result<Vec<Op>, SqlError> {
    let mut ops = Vec::new();
    visit(planned, &planned.plan, &mut ops)?;
    let feeding: Vec<usize> = direct(&ops, &planned.plan);
    match feeding.as_slice() {
        [] if ops.is_empty() => {}
        [last] if scans(&planned.plan) == scans(&ops[*last].node) => {}
        _ => {
            return Err(unsupported(
                "the query's output read from more than one stateful operator, or from a stream beside one",
                "a streaming query's output comes from its last stateful operator alone",
            ));
        }
    }
    Ok(ops)
}

/// Visits `node`'s children, then `node`; records the operators found.
fn visit(
    planned: &Planned,
    node: &Arc<dyn ExecutionPlan>,
    ops: &mut Vec<Op>,
) -> Result<(), SqlError> {
    for child in node.children() {
        visit(planned, child, ops)?;
    }
    let Some((kind, fragments)) = stateful(node)? else {
        return Ok(());
    };
    let index = ops.len();
    let mut sides = Vec::with_capacity(fragments.len());
    for (s, plan) in fragments.into_iter().enumerate() {
        let inside = direct(ops, &plan);
        let source = match inside.as_slice() {
            [] => Source::Streams(planned.streams_of(&plan)),
            [j] if scans(&plan) == scans(&ops[*j].node) => Source::Operator(*j),
            _ => {
                return Err(unsupported(
                    format!(
                        "an input of the {} read from more than one stateful operator, or from a stream beside one",
                        describe(kind)
                    ),
                    "each input of a stateful operator reads streams, or the output of one operator alone",
                ));
            }
        };
        for j in inside {
            ops[j].consumer = Some((index, s));
        }
        sides.push(Side { plan, source });
    }
    ops.push(Op {
        kind,
        node: node.clone(),
        sides,
        consumer: None,
    });
    Ok(())
}

/// The operators of `ops` within `plan` that feed no operator yet: the
/// ones directly beneath it.
fn direct(ops: &[Op], plan: &Arc<dyn ExecutionPlan>) -> Vec<usize> {
    (0..ops.len())
        .filter(|&j| ops[j].consumer.is_none() && contains(plan, &ops[j].node))
        .collect()
}

/// Whether `node` is in `plan`.
fn contains(plan: &Arc<dyn ExecutionPlan>, node: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|n| {
        found = Arc::ptr_eq(n, node);
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// How many scans of a stream `plan` has.
fn scans(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut n = 0;
    let _ = plan.apply(|node| {
        n += usize::from(node.name() == "StreamingTableExec");
        Ok(TreeNodeRecursion::Continue)
    });
    n
}

/// What `node` is, if it is a stateful operator, with the fragments of
/// its sides.
#[allow(clippy::type_complexity)]
fn stateful(
    node: &Arc<dyn ExecutionPlan>,
) -> Result<Option<(Kind, Vec<Arc<dyn ExecutionPlan>>)>, SqlError> {
    if scans(node) == 0 {
        return Ok(None);
    }
    if let Some(a) = node.downcast_ref::<AggregateExec>() {
        return match a.mode() {
            AggregateMode::Single
            | AggregateMode::SinglePartitioned
            | AggregateMode::Final
            | AggregateMode::FinalPartitioned => Ok(Some((Kind::Aggregate, vec![partial_of(a)?]))),
            _ => Ok(None),
        };
    }
    let window = node.downcast_ref::<BoundedWindowAggExec>().is_some()
        || node.downcast_ref::<WindowAggExec>().is_some();
    if window {
        let mut below = node.children()[0].clone();
        // The map stage keeps the input's order (ties go to the row that
        // arrived first), so not the sort the node needs.
        if let Some(sort) = below.downcast_ref::<SortExec>() {
            below = sort.input().clone();
        }
        return Ok(Some((Kind::TopN, vec![below])));
    }
    let children = node.children();
    if node.name().contains("Join") && children.len() == 2 && children.iter().all(|c| scans(c) > 0)
    {
        return Ok(Some((
            Kind::Join,
            vec![children[0].clone(), children[1].clone()],
        )));
    }
    Ok(None)
}

fn describe(kind: Kind) -> &'static str {
    match kind {
        Kind::Aggregate => "aggregation",
        Kind::Join => "join",
        Kind::TopN => "top-N",
    }
}

fn unsupported(construct: impl Into<String>, reason: &str) -> SqlError {
    SqlError::Unsupported {
        construct: construct.into(),
        reason: reason.into(),
    }
}

/// Makes an operator's own type from the graph and its number.
pub(crate) type Of<T> = fn(&Graph, usize) -> Result<T, SqlError>;

/// A planned query and its stateful operators.
pub struct Graph {
    planned: Planned,
    ops: Vec<Op>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("ops", &self.ops)
            .finish_non_exhaustive()
    }
}

impl Graph {
    /// Plans `sql` over `streams` (the one read being `input`) and the
    /// static `tables` within `limits`, and finds its operators.
    pub async fn plan(
        sql: &str,
        streams: impl Into<crate::Streams>,
        input: impl Into<crate::TaskInput>,
        tables: &[crate::Table],
        limits: impl Into<crate::RunLimits>,
    ) -> Result<Self, SqlError> {
        let planned =
            crate::physical(sql, streams.into(), input.into(), tables, limits.into()).await?;
        Self::of(planned)
    }

    pub(crate) fn of(planned: Planned) -> Result<Self, SqlError> {
        let ops = operators(&planned)?;
        Ok(Graph { planned, ops })
    }

    /// Plans `sql` as [`Graph::plan`] does, and makes its last operator of
    /// kind `kind` with `of`; `None` when it has none.
    pub(crate) async fn last_of<T>(
        sql: &str,
        streams: impl Into<crate::Streams>,
        input: impl Into<crate::TaskInput>,
        tables: &[crate::Table],
        limits: impl Into<crate::RunLimits>,
        (kind, of): (Kind, Of<T>),
    ) -> Result<Option<T>, SqlError> {
        let graph = Self::plan(sql, streams, input, tables, limits).await?;
        match (0..graph.len()).rfind(|&i| graph.kind(i) == kind) {
            Some(i) => of(&graph, i).map(Some),
            None => Ok(None),
        }
    }

    /// How many stateful operators the query has.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn kind(&self, i: usize) -> Kind {
        self.ops[i].kind
    }

    /// What each side of operator `i` reads.
    pub fn sources(&self, i: usize) -> Vec<Source> {
        self.ops[i].sides.iter().map(|s| s.source.clone()).collect()
    }

    /// The operator and side that operator `i`'s output feeds; `None`:
    /// the query's output.
    pub fn consumer(&self, i: usize) -> Option<(usize, usize)> {
        self.ops[i].consumer
    }

    /// The schema of the rows of side `side` of operator `i`.
    pub fn side_schema(&self, i: usize, side: usize) -> arrow_schema::SchemaRef {
        self.ops[i].sides[side].plan.schema()
    }

    /// The state directory of each operator: its kind's name, numbered
    /// from the second of a kind on (`aggregate`, `aggregate-2`).
    pub fn names(&self) -> Vec<String> {
        let mut seen = std::collections::HashMap::new();
        self.ops
            .iter()
            .map(|op| {
                let n = seen.entry(op.kind).or_insert(0);
                *n += 1;
                match *n {
                    1 => op.kind.name().to_string(),
                    n => format!("{}-{n}", op.kind.name()),
                }
            })
            .collect()
    }

    /// Map stage: the task's rows of side `side` of operator `i`, which
    /// reads streams. Runs the side's fragment over the task's input.
    pub fn map(&self, i: usize, side: usize) -> Result<crate::Output, SqlError> {
        let plan = self.side_plan(i, side);
        let schema = plan.schema();
        let stream = crate::execute_in_order(plan, self.planned.ctx.task_ctx())?;
        Ok(crate::Output {
            schema,
            stream,
            input: Some(self.planned.input.clone()),
        })
    }

    pub(crate) fn node(&self, i: usize) -> &Arc<dyn ExecutionPlan> {
        &self.ops[i].node
    }

    pub(crate) fn side_plan(&self, i: usize, side: usize) -> Arc<dyn ExecutionPlan> {
        self.ops[i].sides[side].plan.clone()
    }

    /// What operator `i`'s output runs through: the side it feeds, or the
    /// whole plan.
    pub(crate) fn above(&self, i: usize) -> Arc<dyn ExecutionPlan> {
        match self.ops[i].consumer {
            Some((c, s)) => self.side_plan(c, s),
            None => self.planned.plan.clone(),
        }
    }

    pub(crate) fn root(&self) -> &Arc<dyn ExecutionPlan> {
        &self.planned.plan
    }

    pub(crate) fn ctx(&self) -> datafusion::prelude::SessionContext {
        self.planned.ctx.clone()
    }

    pub(crate) fn input(&self) -> crate::input::SharedInput {
        self.planned.input.clone()
    }
}
