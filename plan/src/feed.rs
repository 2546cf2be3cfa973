//! How each operator's output flows to the next one, and what follows
//! from it: whether it emits or reads changes, whether its keys may
//! expire, and whether a join's buffered rows leave the state by its
//! bound.

use sluice_common::spec::{OutputMode, QuerySpec};
use sluice_proto::Changes;
use sluice_sql::{JoinInfo, Kind, OpInfo};

use crate::PlanError;

/// How an operator's output flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// To the sink, as the query's output mode says.
    Sink,
    /// To the next operator, each row once, final: a join's rows, or the
    /// groups of event-time windows the watermark closes (append).
    Final,
    /// To the next aggregation as changes: each changed group's old row
    /// retracted and its new one added (update and complete modes).
    Changes,
}

/// How operator `i` of `ops` feeds the next one, or why it cannot
/// (naming both operators, and the mode where it decides). An
/// aggregation without a window, or a top-N, changes its rows with
/// every batch: only an aggregation that is last can take those changes.
pub(crate) fn feed(spec: &QuerySpec, ops: &[OpInfo], i: usize) -> Result<Feed, String> {
    let op = &ops[i];
    let Some((n, _)) = op.consumer else {
        return Ok(Feed::Sink);
    };
    let next = &ops[n];
    let feeds = format!("`{}` feeds `{}`", op.name, next.name);
    let mode = OutputMode::effective(spec.output_mode, true);
    let window = "group by an event-time window (window, hop, date_bin or session_window) with a watermark on its column";
    match op.kind {
        Kind::Join => Ok(Feed::Final),
        Kind::Aggregate if op.windowed && spec.has_watermark() => Ok(Feed::Final),
        Kind::Aggregate if op.session => Err(format!(
            "the session-window aggregation {feeds}, so it emits each session once, when the watermark passes its end: the query needs a watermark"
        )),
        Kind::Aggregate if mode == OutputMode::Append => Err(format!(
            "the aggregation {feeds}, so in append mode it must emit each group once, final: {window}; without one its groups change with every batch (update and complete modes let an aggregation take those changes)"
        )),
        Kind::Aggregate if next.kind != Kind::Aggregate => Err(format!(
            "the aggregation {feeds}: its groups change with every batch, and only an aggregation can take a group's changes (its old row retracted, its new one added): {window}"
        )),
        Kind::Aggregate if next.session => Err(format!(
            "the aggregation {feeds}: its groups change with every batch, and an aggregation by session windows cannot take a group's changes: {window}"
        )),
        Kind::Aggregate if next.consumer.is_some() => Err(format!(
            "the aggregation {feeds}: its groups change with every batch, so `{}` reads its changes, and an aggregation that reads changes must be the last stateful operator",
            next.name
        )),
        Kind::Aggregate => Ok(Feed::Changes),
        Kind::TopN => Err(format!(
            "the top-N {feeds}, but a top-N's ranks change as rows arrive: it can only be the last stateful operator"
        )),
    }
}

/// What operator `i` of `ops`, whose operators feed as `feeds` says, does
/// with changes: emits them to the aggregation it feeds, reads them from
/// the ones that feed it, or neither. One that would both emit and read,
/// which [`feed`] refuses, is an internal error.
pub(crate) fn changes(ops: &[OpInfo], feeds: &[Feed], i: usize) -> Result<Changes, PlanError> {
    let emits = feeds[i] == Feed::Changes;
    let reads = ops
        .iter()
        .zip(feeds)
        .any(|(o, f)| o.consumer.is_some_and(|(c, _)| c == i) && *f == Feed::Changes);
    match (emits, reads) {
        (false, false) => Ok(Changes::None),
        (true, false) => Ok(Changes::Emit),
        (false, true) => Ok(Changes::Read),
        (true, true) => Err(PlanError::Internal(format!(
            "operator `{}` both reads and emits changes, which the query's check refuses",
            ops[i].name
        ))),
    }
}

/// Whether the keys of operator `op`, which does `changes` with changes,
/// leave its state when idle for the spec's `state_ttl_ms`: an
/// aggregation without a window that neither emits nor reads changes
/// (each state row is one group, replaced whole when it changes), and a
/// join of streams without an event-time bound (whose buffered rows the
/// watermark never evicts). Every other operator's state is bounded by
/// the watermark, or holds rows that changes are retracted from (a
/// forgotten row would make a later retraction wrong).
pub(crate) fn expires(op: &OpInfo, changes: Changes) -> bool {
    match op.kind {
        Kind::Aggregate => !op.windowed && !op.session && changes == Changes::None,
        Kind::Join => op.join.as_ref().is_none_or(|j| j.bound.is_none()),
        Kind::TopN => false,
    }
}

/// Whether each side's buffered rows may leave the state by the join's
/// bound: the other side has a watermark on the bound's time column (or
/// that column is the window end of the aggregation feeding it), so that
/// no row of it that could still match arrives later.
pub(crate) fn evictable(spec: &QuerySpec, join: &JoinInfo) -> [bool; 2] {
    let Some((bound, columns)) = &join.bound else {
        return [false, false];
    };
    // A stream's watermark on the side's time column, or a time column
    // that is the window end of the aggregation feeding the side.
    let watermarked = |side: usize| {
        join.window_end[side]
            || spec
                .input(&join.streams[side])
                .and_then(|i| i.watermark)
                .is_some_and(|w| w.column == columns[side])
    };
    [
        bound.upper_ms.is_some() && watermarked(1),
        bound.lower_ms.is_some() && watermarked(0),
    ]
}
