//! Running one planned batch: its tasks, then the sink manifest, then
//! `commits/N`.
//!
//! Invariant (DESIGN.md, 2): `commits/N` is created only after every task
//! of batch N succeeded and the sink manifest listing their files is
//! durable. A task attempt that is abandoned (stop, term end, another
//! partition failing) is withdrawn from its executor by [`InFlight`].

use std::time::{Duration, Instant};

use futures::future::try_join_all;
use sluice_common::checkpoint::{CommitRecord, OffsetRecord, RECORD_VERSION, padded};
use sluice_common::sink::{FileSink, SinkFile};
use sluice_common::time::now_ms;
use sluice_proto as pb;
use tracing::{debug, warn};

use super::ctx::Ctx;
use super::retry::{Failures, Next, after_failure};
use crate::cluster::scheduler::{Scheduler, TaskOutcome};
use crate::error::DriverError;
use crate::source::SourcePlanner;

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

/// Runs batch `offsets.batch_id` to its commit; returns the rows it read.
pub async fn execute(
    ctx: &Ctx,
    source: &dyn SourcePlanner,
    offsets: &OffsetRecord,
    timings: Timings,
) -> Result<u64, DriverError> {
    let batch = offsets.batch_id;
    let epoch = ctx.term.epoch;

    let t = Instant::now();
    let mut plan = ctx.plan.clone();
    if let Some(record) = &ctx.tables {
        plan.tables = crate::source::tables::plans(&ctx.spec.tables, record, &offsets.tables)?;
    }
    let plan = &plan;
    let parts = source
        .tasks(offsets)
        .into_iter()
        .map(|(p, input)| run_partition(ctx, offsets, p, input, plan));
    let outputs = try_join_all(parts).await?;
    let execution = t.elapsed();

    let t = Instant::now();
    let input_rows: u64 = outputs.iter().map(|o| o.input_rows).sum();
    let bad_records: u64 = outputs.iter().map(|o| o.bad_records).sum();
    if let Some(planned) = source.planned_rows(&offsets.source)
        && planned != input_rows
    {
        return Err(DriverError::Internal(format!(
            "batch {batch}: tasks read {input_rows} rows, the plan has {planned}"
        )));
    }
    let files: Vec<SinkFile> = outputs
        .into_iter()
        .flat_map(|o| o.files)
        .map(|f| SinkFile {
            path: f.path,
            rows: f.rows,
            bytes: f.bytes,
        })
        .collect();
    let rows: u64 = files.iter().map(|f| f.rows).sum();
    let sink = ctx.sink()?;
    // An executor's word is checked: the manifest lists only files that
    // exist with the size that was reported.
    ctx.storage("check sink files", || sink.check_files(&files))
        .await?;
    let manifest = FileSink::manifest(batch, epoch, files);
    ctx.storage("write sink manifest", || sink.write_manifest(&manifest))
        .await?;
    let sink_commit = t.elapsed();

    let t = Instant::now();
    let record = CommitRecord {
        version: RECORD_VERSION,
        batch_id: batch,
        epoch,
        num_rows: rows,
        end_value: offsets.source.end_value(),
        committed_ms: now_ms(),
    };
    let rel = format!("commits/{}", padded(batch));
    let (_, ours) = ctx
        .storage("write commit", || ctx.qc.create(&rel, &record))
        .await?;
    if !ours {
        warn!(batch, "commit already written by another driver; adopting");
        ctx.driver.confirm_leadership(&ctx.term).await?;
    }
    let commit = t.elapsed();

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
        }),
        timestamp_ms: offsets.batch_timestamp_ms,
        epoch,
        skipped_before: 0,
        bad_records,
    };
    let m = &ctx.driver.metrics;
    m.batches_committed
        .with_label_values(&[&ctx.entry.name])
        .inc();
    m.rows_committed
        .with_label_values(&[&ctx.entry.name])
        .inc_by(rows);
    m.batch_seconds.observe(total.as_secs_f64());
    debug!(batch, epoch, rows, total_ms = ms(total), "batch committed");
    ctx.entry.record(progress, offsets.source.end_value());
    Ok(input_rows)
}

/// Withdraws a task attempt from the scheduler unless it completed.
struct InFlight<'a> {
    scheduler: &'a Scheduler,
    task_id: Option<String>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.task_id.take() {
            self.scheduler.cancel(id);
        }
    }
}

/// Runs partition `p` of a batch until it succeeds or fails for good.
async fn run_partition(
    ctx: &Ctx,
    offsets: &OffsetRecord,
    p: u32,
    input: pb::TaskSource,
    plan: &pb::TaskPlan,
) -> Result<pb::TaskOutput, DriverError> {
    let max = ctx.driver.config.max_task_attempts;
    let (mut attempt, mut failures) = (0u32, Failures::default());
    loop {
        let task_id = format!("{}/{}/{}/{}", ctx.entry.id, offsets.batch_id, p, attempt);
        let task = pb::TaskAssignment {
            task_id: task_id.clone(),
            query_id: ctx.entry.id.clone(),
            query_name: ctx.entry.name.clone(),
            batch_id: offsets.batch_id,
            partition: p,
            attempt,
            epoch: ctx.term.epoch,
            source: Some(input.clone()),
            sink: Some(ctx.spec.sink.to_proto()),
            stage: pb::Stage::Map.into(),
            plan: Some(plan.clone()),
        };
        let mut guard = InFlight {
            scheduler: &ctx.term.scheduler,
            task_id: Some(task_id),
        };
        let outcome = ctx.term.scheduler.run_task(task).await;
        guard.task_id = None;
        let (kind, message) = match outcome {
            TaskOutcome::Done(out) => {
                if failures != Failures::default() {
                    ctx.entry.set_error(String::new());
                }
                return Ok(out);
            }
            TaskOutcome::Lost(reason) => (None, reason),
            TaskOutcome::Failed(e) => (Some(e.kind()), e.message),
        };
        let label = kind.map_or("lost", |k| k.as_str_name());
        ctx.driver
            .metrics
            .task_failures
            .with_label_values(&[label])
            .inc();
        let what = format!(
            "batch {} partition {p} attempt {attempt}: {message}",
            offsets.batch_id
        );
        if kind == Some(pb::ErrorKind::StaleEpoch) {
            ctx.driver.confirm_leadership(&ctx.term).await?;
        }
        // A term that is ending loses its tasks: that says nothing of them.
        if ctx.term.cancel.is_cancelled() {
            return Err(DriverError::Cancelled);
        }
        let next = after_failure(kind, failures, max);
        failures.record(kind);
        let lost = || {
            format!(
                "executor lost while running this task {} times",
                failures.lost_streak
            )
        };
        match next {
            Next::Fail if kind.is_none() => {
                return Err(DriverError::TaskFailed(format!("{what}: {}", lost())));
            }
            Next::Fail => {
                return Err(DriverError::TaskFailed(format!(
                    "{what} (gave up after {} attempts)",
                    attempt + 1
                )));
            }
            Next::Retry { delay } => {
                if kind.is_some() {
                    warn!(batch = offsets.batch_id, partition = p, attempt, error = %message, "task failed; retrying");
                    ctx.entry.set_error(format!("{what} (retrying)"));
                } else {
                    warn!(batch = offsets.batch_id, partition = p, attempt, lost = failures.lost_streak, reason = %message, "executor lost while running a task; retrying");
                    ctx.entry
                        .set_error(format!("{what}: {} (retrying)", lost()));
                }
                ctx.sleep(delay).await?;
                attempt += 1;
            }
        }
    }
}
