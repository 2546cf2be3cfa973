//! One task of a batch, from its first attempt until it succeeds or fails
//! for good: retries with backoff, executor losses, stale epochs.
//!
//! An attempt that is abandoned (stop, term end, another task of the batch
//! failing) is withdrawn from its executor by [`InFlight`].

use sluice_common::checkpoint::OffsetRecord;
use sluice_proto as pb;
use tracing::{Instrument, debug, info_span, warn};

use super::ctx::Ctx;
use super::retry::{Failures, Next, after_failure};
use crate::cluster::scheduler::{Scheduler, TaskOutcome};
use crate::error::DriverError;

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

/// The task doing `work` for partition `p` of a batch, before its attempt
/// is set: what every attempt of it runs.
pub fn task(
    ctx: &Ctx,
    offsets: &OffsetRecord,
    work: pb::task_assignment::Work,
    p: u32,
) -> pb::TaskAssignment {
    pb::TaskAssignment {
        query_id: ctx.query.entry.id.clone(),
        query_name: ctx.query.entry.name.clone(),
        batch_id: offsets.batch_id,
        partition: p,
        epoch: ctx.query.term.epoch,
        sink: Some(ctx.sink.clone()),
        work: Some(work),
        checkpoint_root: ctx.query.driver.config.checkpoint_root.clone(),
        ..Default::default()
    }
}

/// Runs `task` until an attempt succeeds or it fails for good; returns
/// the successful attempt's output and how many attempts failed before it.
pub async fn run(
    ctx: &Ctx,
    task: pb::TaskAssignment,
) -> Result<(pb::TaskOutput, u32), DriverError> {
    let max = ctx.query.driver.config.max_task_attempts;
    let (mut attempt, mut failures) = (0u32, Failures::default());
    let p = task.partition;
    // A reduce task is named by its operator (from the second on) and
    // partition: `r3`, `r1.3`.
    let (stage, prefix, stage_label) = match task.state() {
        Some(w) if w.index > 0 => ("reduce partition", format!("r{}.", w.index), "reduce"),
        Some(_) => ("reduce partition", "r".to_string(), "reduce"),
        None => ("partition", String::new(), "map"),
    };
    let m = &ctx.query.driver.metrics;
    let labels = [ctx.query.entry.name.as_str(), stage_label];
    loop {
        m.task_attempts.with_label_values(&labels).inc();
        if attempt > 0 {
            m.task_retries.with_label_values(&labels).inc();
        }
        let task_id = format!(
            "{}/{}/{prefix}{p}/{attempt}",
            ctx.query.entry.id, task.batch_id
        );
        // The executor's span of this attempt names the same task id.
        let span = info_span!("task", task = %task_id, partition = p, attempt);
        let attempt_task = pb::TaskAssignment {
            task_id: task_id.clone(),
            attempt,
            ..task.clone()
        };
        let mut guard = InFlight {
            scheduler: &ctx.query.term.scheduler,
            task_id: Some(task_id),
        };
        let outcome = ctx
            .query
            .term
            .scheduler
            .run_task(attempt_task)
            .instrument(span.clone())
            .await;
        guard.task_id = None;
        let (kind, message) = match outcome {
            TaskOutcome::Done(out) => {
                m.task_seconds
                    .with_label_values(&labels)
                    .observe(out.duration_ms as f64 / 1000.0);
                // In scope, not as `parent:`: log lines list the spans
                // entered, and the task's belongs among them.
                span.in_scope(|| {
                    debug!(
                        input_rows = out.input_rows,
                        rows = out.rows,
                        duration_ms = out.duration_ms,
                        "task done"
                    );
                });
                if failures != Failures::default() {
                    ctx.query.entry.set_error(String::new());
                }
                return Ok((out, attempt));
            }
            TaskOutcome::Lost(reason) => (None, reason),
            TaskOutcome::Failed(e) => (Some(e.kind()), e.message),
        };
        let label = crate::metrics::failure_kind(kind);
        m.task_failures
            .with_label_values(&[&ctx.query.entry.name, label])
            .inc();
        let what = format!(
            "batch {} {stage} {p} attempt {attempt}: {message}",
            task.batch_id
        );
        if kind == Some(pb::ErrorKind::StaleEpoch) {
            ctx.query.driver.confirm_leadership(&ctx.query.term).await?;
        }
        // A term that is ending loses its tasks: that says nothing of them.
        if ctx.query.term.cancel.is_cancelled() {
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
                    warn!(batch = task.batch_id, partition = p, attempt, error = %message, "task failed; retrying");
                    ctx.query.entry.set_error(format!("{what} (retrying)"));
                } else {
                    warn!(batch = task.batch_id, partition = p, attempt, lost = failures.lost_streak, reason = %message, "executor lost while running a task; retrying");
                    ctx.query
                        .entry
                        .set_error(format!("{what}: {} (retrying)", lost()));
                }
                ctx.sleep(delay).await?;
                attempt += 1;
            }
        }
    }
}
