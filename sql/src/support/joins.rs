//! Joins in a plan, and the streams each side of one reads.
//!
//! A task reads one stream, the query's other streams being empty for it,
//! so a join with a static table is supported when every row it emits
//! comes from one row of a stream: one that keeps the stream's side. An
//! inner or outer join of two streams runs as a stateful operator (see
//! `crate::join`), its two sides shuffled by key; a semi or anti join of
//! two streams (`IN`, `EXISTS`, `INTERSECT`, `EXCEPT`) is refused.

use datafusion::common::JoinType;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;

use super::{Reads, read_twice, streams_read, unsupported};
use crate::SqlError;

/// What joins two sides of a plan node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A join of this type (`JOIN`, a comma, `INTERSECT`, `EXCEPT`).
    Join(JoinType),
    /// A subquery in an expression (`IN`, `EXISTS`, a scalar subquery): a
    /// semi, anti or outer join that keeps the rows of the node's inputs.
    Subquery,
}

/// Two joined sides of a plan node and the streams each reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sides {
    pub kind: Kind,
    pub left: Reads,
    pub right: Reads,
}

/// The joins of `node`, a plan over the stream tables `streams`, with the
/// streams each side reads: a join's two inputs, and the node's inputs
/// with each subquery in its expressions.
pub fn join_sides(
    node: &LogicalPlan,
    streams: &[String],
) -> datafusion::common::Result<Vec<Sides>> {
    let mut sides = Vec::new();
    if let LogicalPlan::Join(j) = node {
        sides.push(Sides {
            kind: Kind::Join(j.join_type),
            left: streams_read(&j.left, streams),
            right: streams_read(&j.right, streams),
        });
    }
    let mut subqueries = Vec::new();
    node.apply_subqueries(|q| {
        subqueries.push(streams_read(q, streams));
        Ok(TreeNodeRecursion::Continue)
    })?;
    if !subqueries.is_empty() {
        let outer: Reads = node
            .inputs()
            .into_iter()
            .flat_map(|i| streams_read(i, streams))
            .collect();
        sides.extend(subqueries.into_iter().map(|right| Sides {
            kind: Kind::Subquery,
            left: outer.clone(),
            right,
        }));
    }
    Ok(sides)
}

/// The refusal of a join whose sides are `s`, if Sluice does not run it.
pub fn refusal(s: &Sides) -> Option<SqlError> {
    if let Some(name) = s.left.intersection(&s.right).next() {
        // A join of a stream with itself (or with an operator over it) runs
        // as a stream join: the stream's map tasks make both sides.
        if is_stream_join(s) {
            return None;
        }
        return Some(match s.kind {
            Kind::Join(_) => unsupported(
                format!("a join of the stream with itself (`{name}`)"),
                "each batch's input is read once; join the stream with static tables instead",
            ),
            Kind::Subquery => read_twice(name),
        });
    }
    if !s.left.is_empty() && !s.right.is_empty() {
        return stream_join(s);
    }
    match s.kind {
        Kind::Join(kind) => with_static(kind, !s.left.is_empty(), !s.right.is_empty()),
        Kind::Subquery => (s.left.is_empty() && !s.right.is_empty()).then(|| {
            unsupported(
                format!(
                    "a subquery over {} in a query of static tables",
                    named(&s.right)
                ),
                "it would emit the static table's rows with every batch",
            )
        }),
    }
}

/// Whether `s` is a join of two streams that runs as Sluice's stream
/// join: an inner, left, right or full join with one stream on each side.
pub fn is_stream_join(s: &Sides) -> bool {
    use JoinType as J;
    matches!(s.kind, Kind::Join(J::Inner | J::Left | J::Right | J::Full))
        && s.left.len() == 1
        && s.right.len() == 1
}

/// The refusal of a join of two streams, unless it is a stream join.
fn stream_join(s: &Sides) -> Option<SqlError> {
    if is_stream_join(s) {
        return None;
    }
    let both: Reads = s.left.union(&s.right).cloned().collect();
    let what = match s.kind {
        Kind::Join(
            kind @ (JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full),
        ) => {
            format!("a {kind} join of more than two streams ({})", named(&both))
        }
        Kind::Join(kind) => format!(
            "a {kind} join of {} (IN, EXISTS, INTERSECT or EXCEPT)",
            named(&both)
        ),
        Kind::Subquery => format!(
            "a subquery joining {} (IN, EXISTS or a scalar subquery: a semi, anti or outer join per row)",
            named(&both)
        ),
    };
    Some(unsupported(
        what,
        "Sluice joins two streams with inner, left, right and full outer joins on equal keys",
    ))
}

/// A join of a stream with a static table is supported when every row it
/// emits comes from a row of the stream: an inner or cross join, or an
/// outer, semi or anti join that keeps the stream's side.
fn with_static(kind: JoinType, left_stream: bool, right_stream: bool) -> Option<SqlError> {
    use JoinType as J;
    let keeps_stream = match kind {
        J::Inner => true,
        J::Left | J::LeftSemi | J::LeftAnti | J::LeftMark => left_stream,
        J::Right | J::RightSemi | J::RightAnti | J::RightMark => right_stream,
        J::Full => false,
    };
    (!keeps_stream && (left_stream || right_stream)).then(|| {
        unsupported(
            format!("a {kind} join that keeps the static table's side"),
            "it would emit the static table's unmatched rows with every batch",
        )
    })
}

/// `streams` as a phrase: "the stream `a`", "the streams `a` and `b`".
fn named(streams: &Reads) -> String {
    let names: Vec<String> = streams.iter().map(|n| format!("`{n}`")).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("the streams {} and {last}", rest.join(", "))
        }
        _ => format!("the stream {}", names.concat()),
    }
}
