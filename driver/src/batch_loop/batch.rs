//! Running one planned batch, as the commit protocol reads: its tasks
//! (see [`super::stages`]); their reports summed and checked (see
//! [`super::outcome`]); the sink files checked, the sink manifest (and,
//! every `compact_interval` batches, a manifest segment), or the Kafka
//! sink's transactions recorded and committed (see [`crate::sink::kafka`]);
//! then `commits/N`; then the batch's progress, stored and published.
//!
//! Invariant (docs/design-notes.md, 2): `commits/N` is created only after every task
//! of batch N succeeded: the sink manifest listing their files is durable
//! (and so is the compacted manifest of a batch that compacts), and so is
//! every state version N (a reduce task reports success only once its
//! delta is written). Batch N's shuffle files are removed only
//! after `commits/N`.

use std::time::{Duration, Instant};

use sluice_common::checkpoint::{
    CommitRecord, OffsetRecord, ProgressRecord, RECORD_VERSION, TransactionsRecord,
};
use sluice_common::time::now_ms;
use sluice_proto as pb;
use tracing::{debug, warn};

use super::ctx::Ctx;
use super::outcome::{self, Outcome, Phases};
use super::stages;
use crate::error::DriverError;
use crate::sink::{Committer, Prepared};
use crate::source::Streams;
use crate::watermark::Clocks;

/// How long the phases before execution took.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub started: Instant,
    pub latest_offset: Duration,
    pub wal_commit: Duration,
    pub previous: Option<Instant>,
}

impl Timings {
    /// A re-run batch: its plan already exists.
    pub fn replay(previous: Option<Instant>) -> Self {
        Timings {
            started: Instant::now(),
            latest_offset: Duration::ZERO,
            wal_commit: Duration::ZERO,
            previous,
        }
    }
}

/// What a committed batch read.
#[derive(Debug, Clone)]
pub struct Executed {
    pub input_rows: u64,
    /// The latest event time of each input table (a query with a
    /// watermark).
    pub max_event_times: std::collections::BTreeMap<String, i64>,
}

/// Runs batch `offsets.batch_id` to its commit, reading `streams` and
/// writing to `sink`. `clocks` are what the batches before it said of
/// event time.
pub async fn execute(
    ctx: &Ctx,
    (streams, sink): (&Streams, &dyn Committer),
    offsets: &OffsetRecord,
    timings: Timings,
    clocks: &Clocks,
) -> Result<Executed, DriverError> {
    let batch = offsets.batch_id;
    let t = Instant::now();
    let (outcome, prepared) = match sink.recorded(batch).await? {
        // A driver before this one prepared the batch: its tasks' Kafka
        // transactions are committed, and no task runs again.
        Some(record) => (
            Outcome::prepared(&record.outcome),
            Prepared::Recorded(record),
        ),
        None => {
            let outputs = run_tasks(ctx, streams, offsets).await?;
            let outcome =
                Outcome::of(batch, &outputs, &ctx.query.spec.sink, ctx.stateful.as_ref())?;
            outcome.check(ctx, streams, offsets)?;
            let record = TransactionsRecord {
                version: RECORD_VERSION,
                batch_id: batch,
                epoch: ctx.query.term.epoch,
                transactions: outcome.written.transactions.clone(),
                outcome: outcome.to_prepared(),
            };
            (outcome, Prepared::Reported(record))
        }
    };
    let execution = t.elapsed();

    let t = Instant::now();
    let committed = sink.commit(batch, &outcome.written, prepared).await?;
    let sink_commit = t.elapsed();

    let t = Instant::now();
    // Only this runner moves the count: it is what commits/N-1 recorded.
    let rows_so_far = ctx.query.entry.committed_rows() + outcome.input_rows;
    let seen = clocks
        .clone()
        .after(&planned_watermarks(offsets), &outcome.max_event_times);
    let latest = seen
        .inputs
        .iter()
        .filter_map(|(n, (_, c))| Some((n.clone(), c.max_event?)));
    let latest: std::collections::BTreeMap<String, i64> = latest.collect();
    let many = offsets.inputs.single().is_none();
    let record = CommitRecord {
        version: RECORD_VERSION,
        batch_id: batch,
        epoch: ctx.query.term.epoch,
        num_rows: outcome.rows,
        end_value: offsets.inputs.end_value(),
        committed_ms: now_ms(),
        max_event_time_ms: latest.values().copied().max(),
        max_event_times: if many { latest } else { Default::default() },
        input_rows_total: Some(rows_so_far),
    };
    write_commit(ctx, &record).await?;
    let commit = t.elapsed();
    if let Some(stateful) = &ctx.stateful {
        remove_shuffle(ctx, stateful, batch);
    }

    let phases = Phases {
        started: timings.started,
        previous: timings.previous,
        latest_offset: timings.latest_offset,
        wal_commit: timings.wal_commit,
        execution,
        sink_commit,
        commit,
    };
    let mut progress = outcome::progress(ctx, streams, offsets, &outcome, &phases);
    if let Some((transactions, took)) = committed.transactions {
        // From a task's first record to the last commit's answer, at most.
        let longest = Duration::from_millis(outcome.written.longest_open_ms) + took;
        progress.kafka_transactions = Some(pb::KafkaTransactions {
            committed: transactions,
            aborted: outcome.writer_retries,
            longest_ms: longest.as_millis() as u64,
        });
    }
    report(ctx, progress, &outcome, rows_so_far).await?;
    Ok(Executed {
        input_rows: outcome.input_rows,
        max_event_times: outcome.max_event_times,
    })
}

/// Each watermarked input's watermark as batch `offsets` planned it: the
/// query's for the one input of a query with `source:`.
pub fn planned_watermarks(offsets: &OffsetRecord) -> std::collections::BTreeMap<String, i64> {
    match (offsets.inputs.single(), offsets.watermark_ms) {
        (Some(_), Some(w)) => [(sluice_common::spec::INPUT.to_string(), w)].into(),
        (Some(_), None) => Default::default(),
        (None, _) => offsets.watermarks.clone(),
    }
}

/// Runs the batch's tasks, with the static tables' files it planned.
async fn run_tasks(
    ctx: &Ctx,
    streams: &Streams,
    offsets: &OffsetRecord,
) -> Result<stages::Outputs, DriverError> {
    let mut plan = ctx.plan.clone();
    if let Some(record) = &ctx.tables {
        plan.tables =
            crate::source::tables::plans(&ctx.query.spec.tables, record, &offsets.tables)?;
    }
    stages::run(ctx, offsets, streams.tasks(offsets)?, &plan).await
}

/// Writes `commits/N`; one already there (another driver's, for the same
/// plan) is adopted once this driver is sure it still leads.
async fn write_commit(ctx: &Ctx, record: &CommitRecord) -> Result<(), DriverError> {
    let (_, ours) = ctx
        .storage("write commit", || ctx.query.qc.write_commit(record))
        .await?;
    if !ours {
        warn!(
            batch = record.batch_id,
            "commit already written by another driver; adopting"
        );
        ctx.query.driver.confirm_leadership(&ctx.query.term).await?;
    }
    Ok(())
}

/// Stores the committed batch's progress, then publishes it: durable
/// before it is published, so what a client saw a new leader serves too
/// (see `history.rs`).
async fn report(
    ctx: &Ctx,
    progress: pb::BatchProgress,
    outcome: &Outcome,
    rows_so_far: u64,
) -> Result<(), DriverError> {
    let record = ProgressRecord::from_proto(&progress);
    ctx.storage("write progress", || ctx.query.qc.write_progress(&record))
        .await?;
    ctx.query.driver.metrics.batch_committed(
        &ctx.query.entry.name,
        &progress,
        outcome.rows,
        outcome.written.bytes,
    );
    debug!(
        batch = progress.batch_id,
        epoch = progress.epoch,
        rows = outcome.rows,
        total_ms = progress.duration_ms.as_ref().map_or(0, |d| d.total),
        "batch committed"
    );
    ctx.query.entry.record(progress, rows_so_far);
    Ok(())
}

/// Removes batch `batch`'s shuffle files in the background, once
/// `commits/N` exists: nothing reads them any more. A failure leaves them
/// for retention.
fn remove_shuffle(ctx: &Ctx, stateful: &super::ctx::Stateful, batch: u64) {
    let store = stateful.store.clone();
    ctx.query.term.tasks.spawn(async move {
        if let Err(e) = store.remove_shuffle(batch).await {
            warn!(batch, error = %e, "removing shuffle files failed; retention will");
        }
    });
}
