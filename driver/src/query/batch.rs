//! Running one planned batch: its tasks (see [`super::stages`]), then the
//! sink manifest (and, every `compact_interval` batches, the compacted sink
//! manifest), then `commits/N`.
//!
//! Invariant (docs/design-notes.md, 2): `commits/N` is created only after every task
//! of batch N succeeded: the sink manifest listing their files is durable
//! (and so is the compacted manifest of a batch that compacts), and so is
//! every state version N (a reduce task reports success only once its
//! delta is written). Batch N's shuffle files are removed only
//! after `commits/N`.

use std::time::{Duration, Instant};

use sluice_common::checkpoint::{CommitRecord, OffsetRecord, ProgressRecord, RECORD_VERSION};
use sluice_common::sink::{FileSink, SinkFile};
use sluice_common::time::now_ms;
use sluice_proto as pb;
use tracing::{debug, warn};

use super::ctx::Ctx;
use super::stages;
use crate::error::DriverError;
use crate::source::SourcePlanner;
use crate::watermark::EventClock;

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
#[derive(Debug, Clone, Copy)]
pub struct Executed {
    pub input_rows: u64,
    /// The latest event time of its input (a query with a watermark).
    pub max_event_time_ms: Option<i64>,
}

/// Runs batch `offsets.batch_id` to its commit. `clock` is what the
/// batches before it said of event time.
pub async fn execute(
    ctx: &Ctx,
    source: &dyn SourcePlanner,
    offsets: &OffsetRecord,
    timings: Timings,
    clock: EventClock,
) -> Result<Executed, DriverError> {
    let batch = offsets.batch_id;
    let epoch = ctx.term.epoch;

    let t = Instant::now();
    let mut plan = ctx.plan.clone();
    if let Some(record) = &ctx.tables {
        plan.tables = crate::source::tables::plans(&ctx.spec.tables, record, &offsets.tables)?;
    }
    let outputs = stages::run(ctx, offsets, source.tasks(offsets), &plan).await?;
    let execution = t.elapsed();

    let t = Instant::now();
    let input_rows: u64 = outputs.map.iter().map(|o| o.input_rows).sum();
    let bad_records: u64 = outputs.map.iter().map(|o| o.bad_records).sum();
    let state_rows_total: u64 = outputs.reduce.iter().map(|o| o.state_rows).sum();
    let state_bytes: u64 = outputs.reduce.iter().map(|o| o.state_bytes).sum();
    check_state_budget(ctx, batch, state_bytes)?;
    let dropped: u64 = outputs
        .map
        .iter()
        .map(|o| o.rows_dropped_by_watermark)
        .sum();
    let seen = outputs.map.iter().filter_map(|o| o.max_event_time_ms).max();
    let read_lost: u64 = outputs.map.iter().map(|o| o.records_lost).sum();
    let from_source = source.progress(&offsets.source);
    if let Some(planned) = source.planned_rows(&offsets.source)
        && planned != input_rows
    {
        return Err(DriverError::Internal(format!(
            "batch {batch}: tasks read {input_rows} rows, the plan has {planned}"
        )));
    }
    check_reported_rows(batch, outputs.writers())?;
    let files: Vec<SinkFile> = outputs
        .writers()
        .iter()
        .flat_map(|o| &o.files)
        .map(|f| SinkFile {
            path: f.path.clone(),
            rows: f.rows,
            bytes: f.bytes,
        })
        .collect();
    let rows: u64 = files.iter().map(|f| f.rows).sum();
    let sink_bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let sink = ctx.sink()?;
    // An executor's word is checked: the manifest lists only files that
    // exist with the size that was reported.
    ctx.storage("check sink files", || sink.check_files(&files))
        .await?;
    let manifest = FileSink::manifest(batch, epoch, files);
    let stored = ctx
        .storage("write sink manifest", || sink.write_manifest(&manifest))
        .await?;
    if stored.abandoned {
        // Invariant: only a stopped query abandons a batch, and a stopped
        // query never runs again.
        return Err(DriverError::Internal(format!(
            "batch {batch} was abandoned when its query stopped; it cannot commit"
        )));
    }
    // Before `commits/N` too: a replay of N rebuilds the same compacted
    // manifest from the same files and adopts it.
    let interval = ctx.driver.config.compact_interval;
    ctx.storage("compact sink manifests", || {
        sink.write_compact(&stored, interval)
    })
    .await?;
    let sink_commit = t.elapsed();

    let t = Instant::now();
    // Only this runner moves the count: it is what commits/N-1 recorded.
    let rows_so_far = ctx.entry.committed_rows() + input_rows;
    let record = CommitRecord {
        version: RECORD_VERSION,
        batch_id: batch,
        epoch,
        num_rows: rows,
        end_value: offsets.source.end_value(),
        committed_ms: now_ms(),
        max_event_time_ms: clock.max_event.max(seen),
        input_rows_total: Some(rows_so_far),
    };
    let (_, ours) = ctx
        .storage("write commit", || ctx.qc.write_commit(&record))
        .await?;
    if !ours {
        warn!(batch, "commit already written by another driver; adopting");
        ctx.driver.confirm_leadership(&ctx.term).await?;
    }
    let commit = t.elapsed();
    if let Some(stateful) = &ctx.stateful {
        remove_shuffle(ctx, stateful, batch);
    }

    let total = timings.started.elapsed();
    let secs = |d: Duration| d.as_secs_f64().max(1e-6);
    let since_previous = timings
        .previous
        .map_or(total, |p| timings.started.duration_since(p));
    let ms = |d: Duration| d.as_millis() as u64;
    let progress = pb::BatchProgress {
        id: ctx.entry.id.clone(),
        name: ctx.entry.name.clone(),
        batch_id: batch,
        num_input_rows: input_rows,
        input_rows_per_second: input_rows as f64 / secs(since_previous),
        processed_rows_per_second: input_rows as f64 / secs(total),
        duration_ms: Some(pb::Durations {
            latest_offset: ms(timings.latest_offset),
            wal_commit: ms(timings.wal_commit),
            execution: ms(execution),
            sink_commit: ms(sink_commit),
            commit: ms(commit),
            total: ms(total),
            map: ms(outputs.map_time),
            reduce: ms(outputs.reduce_time),
        }),
        timestamp_ms: offsets.batch_timestamp_ms,
        epoch,
        skipped_before: 0,
        bad_records,
        state_rows_total,
        state_bytes,
        watermark_ms: offsets.watermark_ms,
        rows_dropped_by_watermark: dropped,
        records_lost: from_source.records_lost + read_lost,
        partitions: from_source
            .partitions
            .iter()
            .map(|p| p.to_proto())
            .collect(),
    };
    // Durable before it is published: what a client saw, a new leader
    // serves too (see `history.rs`).
    let record = ProgressRecord::from_proto(&progress);
    ctx.storage("write progress", || ctx.qc.write_progress(&record))
        .await?;
    ctx.driver
        .metrics
        .batch_committed(&ctx.entry.name, &progress, rows, sink_bytes);
    debug!(batch, epoch, rows, total_ms = ms(total), "batch committed");
    ctx.entry.record(progress, rows_so_far);
    Ok(Executed {
        input_rows,
        max_event_time_ms: seen,
    })
}

/// Removes batch `batch`'s shuffle files in the background, once
/// `commits/N` exists: nothing reads them any more. A failure leaves them
/// for retention.
fn remove_shuffle(ctx: &Ctx, stateful: &super::ctx::Stateful, batch: u64) {
    let store = stateful.store.clone();
    ctx.term.tasks.spawn(async move {
        if let Err(e) = store.remove_shuffle(batch).await {
            warn!(batch, error = %e, "removing shuffle files failed; retention will");
        }
    });
}

/// Fails the query, before batch `batch` commits, when its state would
/// hold more than its own budget (`max_state_bytes` of its spec): each
/// query is bounded by its own, never by another's.
fn check_state_budget(ctx: &Ctx, batch: u64, state_bytes: u64) -> Result<(), DriverError> {
    let budget = ctx.spec.max_state_bytes();
    if state_bytes <= budget {
        return Ok(());
    }
    Err(DriverError::LimitExceeded(format!(
        "query {}: batch {batch} would leave its state holding {state_bytes} bytes, above its \
         max_state_bytes {budget}; raise max_state_bytes in a new query, or bound the state \
         with a watermark",
        ctx.entry.name
    )))
}

/// An executor's report is checked where it can be: the rows a task says
/// it wrote are the rows of the files it lists, so a batch never commits
/// rows that no file holds (a faulty or rogue executor's report).
fn check_reported_rows(batch: u64, writers: &[pb::TaskOutput]) -> Result<(), DriverError> {
    for (task, o) in writers.iter().enumerate() {
        let in_files: u64 = o.files.iter().map(|f| f.rows).sum();
        if o.rows != in_files {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported {} rows written, but the files \
                 it lists hold {in_files}",
                o.rows
            )));
        }
    }
    Ok(())
}
