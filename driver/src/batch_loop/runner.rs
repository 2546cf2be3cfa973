//! The micro-batch loop of one query.
//!
//! ```text
//!  resume ───► plan N ──► offsets/N ──► tasks ──► sink manifest ──► commits/N ──┐
//!     │          ▲                                                              │
//!     │          └──────────────────────── N+1 ◄────────────────────────────────┘
//!     └─ re-run N from offsets/N when it was planned but not committed
//! ```
//!
//! The loop ends when a bounded source is fully committed (FINISHED), when
//! the query is stopped or the term ends (cancellation), or on an error
//! that cannot be retried (FAILED). Storage errors are retried with backoff
//! and shown in the query's status meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_common::checkpoint::{FailRecord, Inputs, OffsetRecord, RECORD_VERSION};
use sluice_common::time::now_ms;
use sluice_proto as pb;
use tracing::{Instrument, error, info, info_span, warn};

use super::batch::{self, Timings};
use super::ctx::{Ctx, Query};
use super::protocol::{self, Resumed};
use super::summary::{Summarizer, Summary};
use crate::error::DriverError;
use crate::lifecycle::QueryState;
use crate::query::commit_gate::STOP_GRACE;
use crate::query::entry::QueryEntry;
use crate::sink::{self, Committer, SinkIo};
use crate::source::{self, Limits, Next, SourceIo, Streams};
use crate::state::{Driver, Term};
use crate::watermark::{Clocks, EventClock};

/// Starts the runner of `entry` as a task owned by the term.
pub fn spawn(driver: Arc<Driver>, term: Arc<Term>, entry: Arc<QueryEntry>) {
    let span = info_span!("query", query = %entry.name, epoch = term.epoch);
    let tasks = term.tasks.clone();
    entry.set_running(true);
    let ran = entry.clone();
    tasks.spawn(
        async move {
            run(driver, term, entry).await;
            ran.set_running(false);
        }
        .instrument(span),
    );
}

async fn run(driver: Arc<Driver>, term: Arc<Term>, entry: Arc<QueryEntry>) {
    let result = tokio::select! {
        biased;
        _ = must_end(&entry) => Err(DriverError::Cancelled),
        r = drive(driver.clone(), term.clone(), entry.clone()) => r,
    };
    let stopped = entry.state() == QueryState::Stopped;
    if (matches!(result, Ok(())) || stopped)
        && let Some(spec) = &entry.spec
    {
        let qc = driver.checkpoint.query(&entry.name);
        let end = sink::Ended {
            config: &driver.config,
            qc: &qc,
            epoch: term.epoch,
            stopped,
        };
        sink::ended(&spec.sink, &end).await;
    }
    match result {
        Ok(()) => {
            entry.transition(QueryState::Finished, None);
        }
        Err(DriverError::Cancelled | DriverError::Deposed { .. }) => {
            // A commit the stop cut off before its batch was recorded
            // here, read last: nothing of the query waits for it.
            if stopped {
                let qc = driver.checkpoint.query(&entry.name);
                crate::query::history::show_committed(&entry, &qc).await;
            }
        }
        Err(e) => {
            error!(error = %e, "query failed");
            record_failure(&driver, &term, &entry.name, &e.to_string()).await;
            entry.transition(QueryState::Failed, Some(e.to_string()));
        }
    }
}

/// Resolves when the runner must end: at once when the term ends; after
/// a stop, once a batch commit under way has finished, or after
/// [`STOP_GRACE`] (then the batch waits, written but not recorded, for
/// the query to be submitted again).
async fn must_end(entry: &QueryEntry) {
    entry.stop.cancelled().await;
    if entry.state() == QueryState::Stopped && !entry.commits.idle(STOP_GRACE).await {
        warn!(
            grace_ms = STOP_GRACE.as_millis() as u64,
            "the stop cut off a batch commit under way: the batch commits when the query is submitted again with its state_partitions unchanged"
        );
    }
}

/// Writes the failure marker, so that the query stays FAILED under later
/// leaders until it is resubmitted. A deposed leader writes nothing: its
/// successor runs the query and decides.
async fn record_failure(driver: &Driver, term: &Term, name: &str, error: &str) {
    if term.fence().is_err() {
        return;
    }
    let record = FailRecord {
        version: RECORD_VERSION,
        failed_ms: now_ms(),
        epoch: term.epoch,
        error: error.to_string(),
    };
    if let Err(e) = driver.checkpoint.query(name).record_failure(&record).await {
        error!(error = %e, "the failure could not be recorded: the next leader runs the query again");
    }
}

/// What a runner works with, built once before its first batch: the
/// context, its input streams (and the door they plan through) and its
/// sink.
struct Opened {
    ctx: Ctx,
    streams: Streams,
    io: SourceIo,
    sink: Box<dyn Committer>,
}

/// Opens a query's sources, works out its plan and opens its sink.
async fn open(
    driver: Arc<Driver>,
    term: Arc<Term>,
    entry: Arc<QueryEntry>,
) -> Result<Opened, DriverError> {
    let spec = entry
        .spec
        .clone()
        .ok_or_else(|| DriverError::Internal("query has no spec".into()))?;
    let qc = driver.checkpoint.query(&entry.name);
    let query = Query {
        driver,
        term,
        entry,
        spec,
        qc,
    };
    let io = SourceIo::of(&query);
    let tables = source::tables::load(&io, &query.spec).await?;
    let streams = Streams::open(&io, &query.spec).await?;
    let schemas = streams.schemas();
    let (stateful, output) = super::stages::plan(&query, tables.as_ref(), &schemas).await?;
    let sink = sink::open(&SinkIo::of(&query, output), &query.spec.sink).await?;
    let config = &query.driver.config;
    let plan = pb::TaskPlan {
        sql: query.spec.sql().to_string(),
        streams: schemas
            .iter()
            .map(|(name, schema)| pb::StreamPlan {
                name: name.clone(),
                schema: sluice_sql::encode_schema(schema),
            })
            .collect(),
        tables: Vec::new(),
        plan_budget_ms: config.sql_plan_budget.as_millis() as u64,
        max_output_bytes: config.max_output_bytes_per_task,
    };
    let spec_sink = query.spec.sink.to_task(&query.entry.name, &query.entry.id);
    let ctx = Ctx {
        sink: sink.task_sink(spec_sink),
        query,
        plan,
        tables,
        stateful,
    };
    Ok(Opened {
        ctx,
        streams,
        io,
        sink,
    })
}

async fn drive(
    driver: Arc<Driver>,
    term: Arc<Term>,
    entry: Arc<QueryEntry>,
) -> Result<(), DriverError> {
    driver.metrics.query_started(&entry.name);
    let Opened {
        ctx,
        streams,
        io,
        sink,
    } = open(driver, term, entry).await?;

    let Resumed {
        mut next,
        mut committed,
        replay: mut rerun,
        rows,
    } = protocol::resume(&ctx, |c, n| streams.gap(c, n)).await?;
    let mut clocks = event_clocks(&ctx, &streams, next).await?;
    let committed_end = committed.as_ref().map_or(0, Inputs::end_value);
    ctx.query.entry.set_committed(next as i64 - 1, rows);
    if let Some(committed) = next.checked_sub(1) {
        sink.after_commit(committed);
    }
    info!(
        batch = next,
        committed_end,
        rerun = rerun.is_some(),
        "query resumed"
    );
    let mut last_start: Option<Instant> = None;
    let mut summary = Summarizer::new(Instant::now());
    loop {
        let (offsets, timings) = match rerun.take() {
            Some(o) => {
                streams.planned(o.batch_id, &o.inputs).await?;
                (o, Timings::replay(last_start))
            }
            None => match plan_next(
                &ctx,
                (&streams, &io),
                next,
                committed.as_ref(),
                last_start,
                &clocks,
            )
            .await?
            {
                Some(x) => x,
                None => {
                    log_summary(summary.finish(Instant::now()));
                    return Ok(());
                }
            },
        };
        last_start = Some(timings.started);
        let done = batch::execute(&ctx, (&streams, sink.as_ref()), &offsets, timings, &clocks)
            .instrument(info_span!("batch", batch = offsets.batch_id))
            .await?;
        let rows = done.input_rows;
        clocks = clocks.after(
            &protocol::planned_watermarks(&offsets),
            &done.max_event_times,
        );
        next = offsets.batch_id + 1;
        committed = Some(offsets.inputs.clone());
        log_summary(summary.committed(Instant::now(), offsets.batch_id, rows));
        super::retention::after_commit(&ctx, offsets.batch_id);
        sink.after_commit(offsets.batch_id);
    }
}

/// What committed batches said of event time (see [`crate::watermark`]):
/// each watermarked input's watermark and latest event time after batch
/// `next - 1`.
async fn event_clocks(ctx: &Ctx, streams: &Streams, next: u64) -> Result<Clocks, DriverError> {
    let mut clocks = Clocks::default();
    for (name, w) in streams.watermarks() {
        clocks
            .inputs
            .insert(name.to_string(), (w.delay_ms, EventClock::default()));
    }
    let Some(last) = next.checked_sub(1).filter(|_| !clocks.inputs.is_empty()) else {
        return Ok(clocks);
    };
    let o = ctx
        .storage("read offsets", || ctx.query.qc.offsets(last))
        .await?;
    let c = ctx
        .storage("read commit", || ctx.query.qc.commit(last))
        .await?;
    let (Some(o), Some(c)) = (o, c) else {
        return Ok(clocks);
    };
    let seen = match o.inputs.single() {
        Some(_) => c
            .max_event_time_ms
            .map(|t| [(sluice_common::spec::INPUT.to_string(), t)].into())
            .unwrap_or_default(),
        None => c.max_event_times.clone(),
    };
    Ok(clocks.after(&protocol::planned_watermarks(&o), &seen))
}

/// The INFO line of a running query (see [`crate::batch_loop::summary`]).
fn log_summary(summary: Option<Summary>) {
    if let Some(s) = summary {
        info!(
            batches = s.batches,
            rows = s.rows,
            last_batch = s.last_batch,
            rows_total = s.rows_total,
            rows_per_second = s.rows_per_second.round() as u64,
            "query progress"
        );
    }
}

/// Waits for the trigger and for new input, then writes `offsets/N`.
/// Returns `None` once a bounded source is fully committed.
async fn plan_next(
    ctx: &Ctx,
    (streams, io): (&Streams, &SourceIo),
    batch_id: u64,
    committed: Option<&Inputs>,
    last_start: Option<Instant>,
    clocks: &Clocks,
) -> Result<Option<(OffsetRecord, Timings)>, DriverError> {
    let interval = Duration::from_millis(ctx.query.spec.trigger.interval_ms);
    if let Some(prev) = last_start {
        ctx.sleep((prev + interval).saturating_duration_since(Instant::now()))
            .await?;
    }
    loop {
        let started = Instant::now();
        let slots: u32 = ctx
            .query
            .term
            .scheduler
            .executors()
            .await
            .iter()
            .map(|e| e.slots)
            .sum();
        let limits = Limits {
            max_rows_per_batch: Some(
                ctx.query
                    .spec
                    .max_rows_per_batch
                    .unwrap_or(ctx.query.driver.config.max_rows_per_batch),
            ),
            max_bytes_per_batch: ctx.query.driver.config.max_bytes_per_batch,
            max_rows_per_task: ctx.query.driver.config.max_rows_per_task,
            max_bytes_per_task: ctx.query.driver.config.max_bytes_per_task,
            parallelism: slots.max(1),
        };
        let (inputs, watermarks) = match streams.next(committed, limits).await? {
            Next::Finished => match clocks.at_end().filter(|_| ctx.stateful.is_some()) {
                // Every input has ended: one last batch, reading nothing,
                // lets the operator emit what it still holds.
                Some(end) => (streams.idle(committed), end),
                None => return Ok(None),
            },
            Next::Wait(d) => {
                ctx.sleep(d).await?;
                continue;
            }
            Next::Batch(inputs) => (inputs, clocks.next()),
        };
        let many = inputs.single().is_none();
        let tables = match &ctx.tables {
            Some(record) => source::tables::files(io, &ctx.query.spec, record).await?,
            None => Default::default(),
        };
        let record = OffsetRecord {
            tables,
            version: RECORD_VERSION,
            batch_id,
            epoch: ctx.query.term.epoch,
            batch_timestamp_ms: now_ms(),
            watermark_ms: watermarks.query,
            watermarks: if many {
                watermarks.inputs
            } else {
                Default::default()
            },
            inputs,
            max_rows_per_task: Some(limits.max_rows_per_task),
            max_rows_per_batch: limits.max_rows_per_batch,
        };
        let latest_offset = started.elapsed();
        let t = Instant::now();
        let (stored, ours) = ctx
            .storage("write offsets", || ctx.query.qc.write_offsets(&record))
            .await?;
        if !ours {
            warn!(
                batch = batch_id,
                "offsets already written by another driver; adopting"
            );
            ctx.query.driver.confirm_leadership(&ctx.query.term).await?;
        }
        streams.planned(batch_id, &stored.inputs).await?;
        let timings = Timings {
            started,
            latest_offset,
            wal_commit: t.elapsed(),
            previous: last_start,
        };
        return Ok(Some((stored, timings)));
    }
}
