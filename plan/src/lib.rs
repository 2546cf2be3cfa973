//! The plan of a stateful query: its state operators in the order they
//! run, each with its name (its directory under `state/`), what its sides
//! read, what it feeds, how it emits (its mode, and whether it emits or
//! reads changes), whether a join's buffered rows leave the state by its
//! bound, and whether its keys expire (`state_ttl_ms`).
//!
//! ```text
//!  spec + sluice_sql::check's operators ─► plan ─► [StatefulOp]
//!     the driver's submit check (refuses what cannot run)
//!     the driver's runner (each reduce task's work)
//!     `sluice state` (each operator's state schema, as its reduce tasks plan it)
//! ```
//!
//! [`plan`] is a function of the spec and the checked SQL alone: the
//! submit, a runner and `sluice state` work out the same plan.

mod feed;

pub use feed::Feed;

use sluice_common::spec::{OutputMode, QuerySpec};
use sluice_proto as pb;
use sluice_sql::{Checked, Kind, Source};

/// The state directory of a query's `dedup`, its one operator.
pub const DEDUP: &str = "dedup";

/// Why a query's operators cannot run as its SQL has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// An operator feeds another as it cannot (the text names both).
    #[error("{0}")]
    Invalid(String),
    /// A plan that the rules of [`Feed`] make impossible.
    #[error("{0}")]
    Internal(String),
}

/// One operator of a stateful query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulOp {
    pub operator: Operator,
    /// Its state directory under `state/`.
    pub name: String,
    /// What each of its sides reads.
    pub sources: Vec<Source>,
    /// The operator and side its output feeds; `None`: the sink.
    pub consumer: Option<(usize, usize)>,
    /// Whether its keys expire when idle for the spec's `state_ttl_ms`
    /// (see [`feed::expires`]): its tasks are told the ttl and the
    /// batch's time, and its rows are stored with their stamp.
    pub ttl: bool,
}

/// A stateful query's operator, as its tasks are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    /// An aggregation, emitting as the mode says; whether it emits or
    /// reads changes.
    Aggregate(OutputMode, pb::Changes),
    /// Deduplication by the spec's `dedup` columns.
    Dedup(pb::Dedup),
    /// The join of two streams; whether each side's rows leave the state
    /// by the bound (left, right).
    Join([bool; 2]),
    /// The top N rows of each group, emitted as the mode says.
    TopN(OutputMode),
}

impl Operator {
    /// Its reduce task's work over the state partition `state` names.
    pub fn reduce(&self, state: pb::StateWork) -> pb::task_assignment::Work {
        self.work(Some(state))
    }

    /// Its reduce task's work; `state` is `None` where only the operator
    /// itself is planned (its state schema).
    pub fn work(&self, state: Option<pb::StateWork>) -> pb::task_assignment::Work {
        use pb::task_assignment::Work;
        match self {
            Operator::Aggregate(mode, changes) => Work::Aggregate(pb::AggregateWork {
                state,
                output_mode: mode.to_proto().into(),
                changes: (*changes).into(),
            }),
            Operator::Dedup(d) => Work::Dedup(pb::DedupWork {
                state,
                dedup: Some(d.clone()),
            }),
            Operator::Join([evict_left, evict_right]) => Work::Join(pb::JoinWork {
                state,
                evict_left: *evict_left,
                evict_right: *evict_right,
            }),
            Operator::TopN(mode) => Work::TopN(pb::TopNWork {
                state,
                output_mode: mode.to_proto().into(),
            }),
        }
    }
}

/// The operators of `spec`'s query, whose SQL `checked` describes, in the
/// order they run; none when it keeps no state. A query with `dedup` (and
/// SQL without a stateful operator, which the submit's check requires)
/// has the one [`DEDUP`] operator reading every stream.
///
/// The operator whose output goes to the sink emits as the query's mode
/// says; one that feeds another emits each row once (append), or its
/// changes to an aggregation that reads them ([`Feed`]). An operator
/// that feeds another as it cannot is [`PlanError::Invalid`], the first
/// such in the order they run.
pub fn plan(spec: &QuerySpec, checked: &Checked) -> Result<Vec<StatefulOp>, PlanError> {
    let ops = &checked.ops;
    let feeds = (0..ops.len())
        .map(|i| feed::feed(spec, ops, i))
        .collect::<Result<Vec<Feed>, String>>()
        .map_err(PlanError::Invalid)?;
    if let (Some(d), true) = (&spec.dedup, ops.is_empty()) {
        let streams = spec.inputs().iter().map(|i| i.name.to_string()).collect();
        return Ok(vec![StatefulOp {
            operator: Operator::Dedup(pb::Dedup {
                columns: d.columns.clone(),
                within_ms: d.within_ms,
            }),
            name: DEDUP.into(),
            sources: vec![Source::Streams(streams)],
            consumer: None,
            ttl: false,
        }]);
    }
    let query_mode = OutputMode::effective(spec.output_mode, true);
    let mut out = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let mode = match feeds[i] {
            Feed::Sink | Feed::Changes => query_mode,
            Feed::Final => OutputMode::Append,
        };
        let changes = feed::changes(ops, &feeds, i)?;
        let operator = match (op.kind, &op.join) {
            (Kind::Join, Some(j)) => Operator::Join(feed::evictable(spec, j)),
            (Kind::Join, None) => Operator::Join([false, false]),
            (Kind::Aggregate, _) => Operator::Aggregate(mode, changes),
            (Kind::TopN, _) => Operator::TopN(mode),
        };
        out.push(StatefulOp {
            operator,
            name: op.name.clone(),
            sources: op.sources.clone(),
            consumer: op.consumer,
            ttl: spec.state_ttl_ms.is_some() && feed::expires(op, changes),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
