//! The commit rules of the batch loop, over three narrow seams: where a
//! query resumes from its checkpoint ([`resume`]), and how one batch goes
//! from its plan to `commits/N` ([`commit`]).
//!
//! ```text
//!  resume:  latest offsets/N, commits/M ─► decide ─► fresh | next (N checked against commits/N)
//!                                                  | replay N from offsets/N (it must follow commits/N-1)
//!  commit:  sink.recorded(N)? ─ yes ─► its record, no task runs again ─┐
//!                             └ no ──► tasks.run(offsets/N) ───────────┴─► sink.commit(N) ─► commits/N
//! ```
//!
//! The seams are the checkpoint as the loop reads and writes it
//! ([`BatchLog`]), the scheduler as a batch sees it ([`Tasks`]) and the
//! sink's [`Committer`]. The runtime implements them over storage and the
//! executors (`ctx.rs`, `batch.rs`); the tests here implement them in
//! memory, so the rules are checked without sockets or disks.
//!
//! Invariants enforced here (docs/design-notes.md, 2): `commits/N` is
//! written only after every task of N succeeded and the sink made N's
//! output visible; a batch that fails or is cut off on the way writes
//! nothing (it is abandoned, and the next runner replays it from the same
//! `offsets/N`); a stop lets a sink commit that began go on to
//! `commits/N`, and none begins after it; a batch a driver before this one prepared runs no task
//! again; a record another driver wrote is adopted only once this driver
//! is sure it still leads.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sluice_common::Error as CommonError;
use sluice_common::checkpoint::{
    CommitRecord, Inputs, Log, OffsetRecord, RECORD_VERSION, TransactionsRecord,
};
use sluice_common::time::now_ms;
use tracing::warn;

use super::outcome::Outcome;
use crate::error::DriverError;
use crate::query::commit_gate::Shield;
use crate::recovery::{Recovery, decide};
use crate::sink::{Committed, Committer, Prepared};
use crate::watermark::Clocks;

/// The query's checkpoint as its batch loop reads and writes it, under
/// one term: each call is retried and fenced by the implementation.
pub trait BatchLog: Sync {
    /// The latest entry of `log`, if any.
    fn latest(&self, log: Log) -> BoxFuture<'_, Result<Option<u64>, DriverError>>;
    /// `offsets/N`, which must exist.
    fn offsets(&self, batch: u64) -> BoxFuture<'_, Result<OffsetRecord, DriverError>>;
    /// `commits/N`, which must exist.
    fn commit(&self, batch: u64) -> BoxFuture<'_, Result<CommitRecord, DriverError>>;
    /// Writes `commits/N` unless it exists; whether this call wrote it.
    fn write_commit<'a>(
        &'a self,
        record: &'a CommitRecord,
    ) -> BoxFuture<'a, Result<bool, DriverError>>;
    /// Begins the batch's commit, from its sink commit to `commits/N`: a
    /// stop lets it finish (see [`crate::query::commit_gate`]).
    /// `Cancelled` once the query was stopped: no commit begins then.
    fn shield(&self) -> Result<Shield<'_>, DriverError>;
    /// Confirms that this driver still leads, after finding a record
    /// another driver wrote.
    fn confirm_leadership(&self) -> BoxFuture<'_, Result<(), DriverError>>;
    /// How errors name entry `batch` of `log`.
    fn describe_entry(&self, log: Log, batch: u64) -> String;
    /// How errors name the query's checkpoint.
    fn describe_dir(&self) -> String;
}

/// The scheduler as one batch sees it.
pub trait Tasks: Sync {
    /// Runs the tasks of `offsets`' batch until each succeeded, and returns
    /// their reports summed and checked; an error once one fails for good
    /// (the batch is then abandoned).
    fn run<'a>(&'a self, offsets: &'a OffsetRecord) -> BoxFuture<'a, Result<Outcome, DriverError>>;
}

/// Where a query starts, from its checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The next batch to plan (or the one to replay).
    pub next: u64,
    /// The input of the last committed batch.
    pub committed: Option<Inputs>,
    /// The batch planned but not committed, to run again as planned.
    pub replay: Option<OffsetRecord>,
    /// The input rows of the committed batches, as the last commit says.
    pub rows: u64,
}

/// Where to start (see [`crate::recovery`]). `gap` says why a plan cannot
/// follow the committed input, if it cannot (the sources' check).
pub async fn resume(
    log: &dyn BatchLog,
    gap: impl Fn(Option<&Inputs>, &Inputs) -> Option<String>,
) -> Result<Resumed, DriverError> {
    let offsets = log.latest(Log::Offsets).await?;
    let commits = log.latest(Log::Commits).await?;
    match decide(offsets, commits) {
        Recovery::Fresh => Ok(Resumed {
            next: 0,
            committed: None,
            replay: None,
            rows: 0,
        }),
        Recovery::Next { committed } => {
            let (input, rows) = committed_input(log, committed).await?;
            Ok(Resumed {
                next: committed + 1,
                committed: Some(input),
                replay: None,
                rows,
            })
        }
        Recovery::Rerun { batch } => {
            let planned = log.offsets(batch).await?;
            let (committed, rows) = match batch.checked_sub(1) {
                Some(prev) => {
                    let (input, rows) = committed_input(log, prev).await?;
                    (Some(input), rows)
                }
                None => (None, 0),
            };
            let wrong = (planned.batch_id != batch)
                .then(|| format!("records batch {}", planned.batch_id))
                .or_else(|| gap(committed.as_ref(), &planned.inputs));
            if let Some(reason) = wrong {
                return Err(corrupt(log.describe_entry(Log::Offsets, batch), reason));
            }
            Ok(Resumed {
                next: batch,
                committed,
                replay: Some(planned),
                rows,
            })
        }
        Recovery::Damaged { reason } => Err(corrupt(log.describe_dir(), reason)),
    }
}

/// What committed batch `batch` read, from `offsets/N`, checked against
/// `commits/N`: both are read and decoded, so that a damaged record is
/// reported by name even when its batch committed long ago. With it, the
/// input rows of batches 0 to `batch`.
async fn committed_input(log: &dyn BatchLog, batch: u64) -> Result<(Inputs, u64), DriverError> {
    let c = log.commit(batch).await?;
    let o = log.offsets(batch).await?;
    if o.batch_id != batch || c.batch_id != batch || o.inputs.end_value() != c.end_value {
        let reason = format!(
            "plans batch {} ending at {}, but {} records batch {} ending at {}",
            o.batch_id,
            o.inputs.end_value(),
            Log::Commits.entry(batch),
            c.batch_id,
            c.end_value
        );
        return Err(corrupt(log.describe_entry(Log::Offsets, batch), reason));
    }
    Ok((o.inputs, c.rows_so_far()))
}

fn corrupt(path: String, reason: String) -> DriverError {
    CommonError::Corrupt { path, reason }.into()
}

/// What the batches before this one left: the term's epoch, the input
/// rows committed so far and what they said of event time.
pub struct Before<'a> {
    pub epoch: u64,
    pub rows: u64,
    pub clocks: &'a Clocks,
}

/// A committed batch, with how long each phase of its commit took.
#[derive(Debug)]
pub struct Done {
    pub outcome: Outcome,
    pub committed: Committed,
    pub record: CommitRecord,
    pub execution: Duration,
    pub sink_commit: Duration,
    pub commit: Duration,
}

/// Takes the batch `offsets` plans to `commits/N`: its tasks run (unless
/// a driver before this one prepared it), the sink makes its output
/// visible, then `commits/N` is written. An error anywhere abandons the
/// batch with nothing of it committed.
pub async fn commit(
    (log, tasks, sink): (&dyn BatchLog, &dyn Tasks, &dyn Committer),
    offsets: &OffsetRecord,
    before: Before<'_>,
) -> Result<Done, DriverError> {
    let batch = offsets.batch_id;
    let t = Instant::now();
    let (outcome, prepared) = match sink.recorded(batch).await? {
        // A driver before this one prepared the batch: what it recorded
        // is committed, and no task runs again.
        Some(record) => (
            Outcome::prepared(&record.outcome),
            Prepared::Recorded(record),
        ),
        None => {
            let outcome = tasks.run(offsets).await?;
            let record = TransactionsRecord {
                version: RECORD_VERSION,
                batch_id: batch,
                epoch: before.epoch,
                transactions: outcome.written.transactions.clone(),
                outcome: outcome.to_prepared(),
            };
            (outcome, Prepared::Reported(record))
        }
    };
    let execution = t.elapsed();

    let t = Instant::now();
    let shield = log.shield()?;
    let committed = sink.commit(batch, &outcome.written, prepared).await?;
    let sink_commit = t.elapsed();

    let t = Instant::now();
    let record = commit_record(offsets, &outcome, &before);
    if !log.write_commit(&record).await? {
        warn!(batch, "commit already written by another driver; adopting");
        log.confirm_leadership().await?;
    }
    drop(shield);
    Ok(Done {
        outcome,
        committed,
        record,
        execution,
        sink_commit,
        commit: t.elapsed(),
    })
}

/// `commits/N` of the batch `offsets` plans, once it ran to `outcome`.
fn commit_record(offsets: &OffsetRecord, outcome: &Outcome, before: &Before<'_>) -> CommitRecord {
    let seen = before
        .clocks
        .clone()
        .after(&planned_watermarks(offsets), &outcome.max_event_times);
    let latest: BTreeMap<String, i64> = seen
        .inputs
        .iter()
        .filter_map(|(n, (_, c))| Some((n.clone(), c.max_event?)))
        .collect();
    let many = offsets.inputs.single().is_none();
    CommitRecord {
        version: RECORD_VERSION,
        batch_id: offsets.batch_id,
        epoch: before.epoch,
        num_rows: outcome.rows,
        end_value: offsets.inputs.end_value(),
        committed_ms: now_ms(),
        max_event_time_ms: latest.values().copied().max(),
        max_event_times: if many { latest } else { Default::default() },
        input_rows_total: Some(before.rows + outcome.input_rows),
    }
}

/// Each watermarked input's watermark as batch `offsets` planned it: the
/// query's for the one input of a query with `source:`.
pub fn planned_watermarks(offsets: &OffsetRecord) -> BTreeMap<String, i64> {
    match (offsets.inputs.single(), offsets.watermark_ms) {
        (Some(_), Some(w)) => [(sluice_common::spec::INPUT.to_string(), w)].into(),
        (Some(_), None) => Default::default(),
        (None, _) => offsets.watermarks.clone(),
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
