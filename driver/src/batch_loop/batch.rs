//! Running one planned batch: its commit (see [`super::protocol`]) over
//! the executors (its tasks, see [`super::stages`], their reports summed
//! and checked, see [`super::outcome`]), this query's checkpoint and its
//! sink; then the batch's progress, stored and published.
//!
//! Invariant (docs/design-notes.md, 2): `commits/N` is created only after every task
//! of batch N succeeded (enforced by [`super::protocol::commit`]): the sink
//! manifest listing their files is durable (and so is the compacted
//! manifest of a batch that compacts), and so is every state version N (a
//! reduce task reports success only once its delta is written). Batch N's
//! shuffle files are removed only after `commits/N`.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sluice_common::checkpoint::{OffsetRecord, ProgressRecord};
use sluice_proto as pb;
use tracing::{debug, warn};

use super::ctx::Ctx;
use super::outcome::{self, Outcome, Phases};
use super::{protocol, stages};
use crate::error::DriverError;
use crate::sink::Committer;
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

/// Runs batch `offsets.batch_id` to its commit (see
/// [`protocol::commit`]), reading `streams` and writing to `sink`, then
/// reports it. `clocks` are what the batches before it said of event time.
pub async fn execute(
    ctx: &Ctx,
    (streams, sink): (&Streams, &dyn Committer),
    offsets: &OffsetRecord,
    timings: Timings,
    clocks: &Clocks,
) -> Result<Executed, DriverError> {
    let batch = offsets.batch_id;
    let tasks = Scheduled { ctx, streams };
    let before = protocol::Before {
        epoch: ctx.query.term.epoch,
        // Only this runner moves the count: it is what commits/N-1 recorded.
        rows: ctx.query.entry.committed_rows(),
        clocks,
    };
    let done = protocol::commit((ctx, &tasks, sink), offsets, before).await?;
    if let Some(stateful) = &ctx.stateful {
        remove_shuffle(ctx, stateful, batch);
    }

    let phases = Phases {
        started: timings.started,
        previous: timings.previous,
        latest_offset: timings.latest_offset,
        wal_commit: timings.wal_commit,
        execution: done.execution,
        sink_commit: done.sink_commit,
        commit: done.commit,
    };
    let outcome = &done.outcome;
    let mut progress = outcome::progress(ctx, streams, offsets, outcome, &phases);
    if let Some((transactions, took)) = done.committed.transactions {
        // From a task's first record to the last commit's answer, at most.
        let longest = Duration::from_millis(outcome.written.longest_open_ms) + took;
        progress.kafka_transactions = Some(pb::KafkaTransactions {
            committed: transactions,
            aborted: outcome.writer_retries,
            longest_ms: longest.as_millis() as u64,
        });
    }
    let rows_so_far = done.record.rows_so_far();
    report(ctx, progress, outcome, rows_so_far).await?;
    Ok(Executed {
        input_rows: done.outcome.input_rows,
        max_event_times: done.outcome.max_event_times,
    })
}

/// The executors, as a batch of this query sees them: its tasks run
/// there, and their reports are summed and checked here.
struct Scheduled<'a> {
    ctx: &'a Ctx,
    streams: &'a Streams,
}

impl protocol::Tasks for Scheduled<'_> {
    fn run<'a>(&'a self, offsets: &'a OffsetRecord) -> BoxFuture<'a, Result<Outcome, DriverError>> {
        Box::pin(async move {
            let (ctx, streams) = (self.ctx, self.streams);
            let outputs = run_tasks(ctx, streams, offsets).await?;
            let stateful = ctx.stateful.as_ref();
            let outcome = Outcome::of(offsets.batch_id, &outputs, &ctx.query.spec.sink, stateful)?;
            outcome.check(ctx, streams, offsets)?;
            Ok(outcome)
        })
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
