//! What a batch's tasks reported, summed ([`Outcome`]), the checks the
//! driver makes of it before the batch may commit, and the progress report
//! built from it once it has.

use std::time::{Duration, Instant};

use sluice_common::checkpoint::{OffsetRecord, OperatorState, PreparedOutcome, StateRebuild};
use sluice_common::spec::SinkSpec;
use sluice_proto as pb;

use super::ctx::{Ctx, Stateful};
use super::stages::Outputs;
use crate::error::DriverError;
use crate::sink::Written;
use crate::source::Streams;

/// A batch's task reports, summed.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub input_rows: u64,
    pub bad_records: u64,
    pub state_rows_total: u64,
    pub state_bytes: u64,
    /// The state keys that expired (`state_ttl_ms`), over every operator.
    pub state_expired: u64,
    /// Each state operator's rows and bytes (their sums are the two above).
    pub state_operators: Vec<OperatorState>,
    /// A bounded join's input rows whose time was NULL (never held).
    pub rows_without_event_time: u64,
    /// The state partitions rebuilt after a rescale, over every operator.
    pub state_rebuild: Option<StateRebuild>,
    pub rows_dropped_by_watermark: u64,
    /// The latest event time of the input (a query with a watermark).
    pub max_event_time_ms: Option<i64>,
    /// The latest event time of each input table that reported one.
    pub max_event_times: std::collections::BTreeMap<String, i64>,
    /// Records the tasks found lost (a Kafka log's gaps).
    pub records_lost: u64,
    /// What the writing tasks wrote, as the sink summed it (nothing of a
    /// batch a driver before this one prepared but its bytes and longest
    /// transaction).
    pub written: Written,
    /// Failed attempts of the writing tasks (see `Outputs::writer_retries`).
    pub writer_retries: u64,
    pub rows: u64,
    pub map_time: Duration,
    pub reduce_time: Duration,
}

impl Outcome {
    /// Sums `outputs`, after checking what can be checked of each writer's
    /// report against the query's `sink` (see [`crate::sink::written`]);
    /// the state by operator of `stateful` (see [`operator_state`]).
    pub fn of(
        batch: u64,
        outputs: &Outputs,
        sink: &SinkSpec,
        stateful: Option<&Stateful>,
    ) -> Result<Self, DriverError> {
        let map = &outputs.map;
        let reduce = &outputs.reduce;
        let writers = outputs.writers();
        let written = crate::sink::written(batch, writers, sink)?;
        Ok(Outcome {
            input_rows: map.iter().map(|o| o.input_rows).sum(),
            bad_records: map.iter().map(|o| o.bad_records).sum(),
            state_rows_total: reduce.iter().map(|o| o.state_rows).sum(),
            state_bytes: reduce.iter().map(|o| o.state_bytes).sum(),
            state_expired: reduce.iter().map(|o| o.state_expired).sum(),
            state_operators: operator_state(batch, reduce, stateful),
            rows_without_event_time: reduce.iter().map(|o| o.rows_without_event_time).sum(),
            state_rebuild: state_rebuild(reduce),
            rows_dropped_by_watermark: map.iter().map(|o| o.rows_dropped_by_watermark).sum(),
            max_event_time_ms: map.iter().filter_map(|o| o.max_event_time_ms).max(),
            max_event_times: max_event_times(outputs),
            records_lost: map.iter().map(|o| o.records_lost).sum(),
            rows: writers.iter().map(|o| o.rows).sum(),
            writer_retries: outputs.writer_retries,
            written,
            map_time: outputs.map_time,
            reduce_time: outputs.reduce_time,
        })
    }

    /// A batch prepared by a driver before this one, as it recorded it.
    pub fn prepared(o: &PreparedOutcome) -> Self {
        Outcome {
            input_rows: o.input_rows,
            bad_records: o.bad_records,
            state_rows_total: o.state_rows_total,
            state_bytes: o.state_bytes,
            state_expired: o.state_expired,
            state_operators: o.state_operators.clone(),
            rows_without_event_time: o.rows_without_event_time,
            state_rebuild: o.state_rebuild,
            rows_dropped_by_watermark: o.rows_dropped_by_watermark,
            max_event_time_ms: o.max_event_time_ms,
            max_event_times: o.max_event_times.clone(),
            records_lost: o.records_lost,
            written: Written {
                bytes: o.sink_bytes,
                longest_open_ms: o.longest_open_ms,
                ..Written::default()
            },
            writer_retries: o.writer_retries,
            rows: o.rows,
            map_time: Duration::ZERO,
            reduce_time: Duration::ZERO,
        }
    }

    /// What a prepared batch records of its outcome.
    pub fn to_prepared(&self) -> PreparedOutcome {
        PreparedOutcome {
            input_rows: self.input_rows,
            rows: self.rows,
            sink_bytes: self.written.bytes,
            bad_records: self.bad_records,
            records_lost: self.records_lost,
            rows_dropped_by_watermark: self.rows_dropped_by_watermark,
            state_rows_total: self.state_rows_total,
            state_bytes: self.state_bytes,
            state_expired: self.state_expired,
            state_operators: self.state_operators.clone(),
            rows_without_event_time: self.rows_without_event_time,
            state_rebuild: self.state_rebuild,
            max_event_time_ms: self.max_event_time_ms,
            max_event_times: self.max_event_times.clone(),
            longest_open_ms: self.written.longest_open_ms,
            writer_retries: self.writer_retries,
        }
    }

    /// The checks against the plan and the query's limits: the input rows
    /// are what the source planned (where it knows), and the state fits
    /// the query's own budget.
    pub fn check(
        &self,
        ctx: &Ctx,
        streams: &Streams,
        offsets: &OffsetRecord,
    ) -> Result<(), DriverError> {
        let batch = offsets.batch_id;
        if let Some(planned) = streams.planned_rows(&offsets.inputs)
            && planned != self.input_rows
        {
            return Err(DriverError::Internal(format!(
                "batch {batch}: tasks read {} rows, the plan has {planned}",
                self.input_rows
            )));
        }
        check_state_budget(ctx, batch, self.state_bytes)
    }
}

/// Each state operator's rows and bytes after batch `batch`: the sums
/// over its state partitions. `reduce` holds the reduce tasks operator by
/// operator, in the order of `stateful.ops`, one per state partition (see
/// `stages::run`). Reports of another shape cannot be told apart by
/// operator: logged, and the batch shows only its totals (a figure of the
/// progress, not a reason to fail the batch).
fn operator_state(
    batch: u64,
    reduce: &[pb::TaskOutput],
    stateful: Option<&Stateful>,
) -> Vec<OperatorState> {
    let Some(s) = stateful else {
        return Vec::new();
    };
    let names: Vec<&str> = s.ops.iter().map(|op| op.name.as_str()).collect();
    by_operator(batch, reduce, &names, s.partitions as usize)
}

/// [`operator_state`] of the operators `names`, of `partitions` each.
fn by_operator(
    batch: u64,
    reduce: &[pb::TaskOutput],
    names: &[&str],
    partitions: usize,
) -> Vec<OperatorState> {
    if partitions == 0 || reduce.len() != names.len() * partitions {
        tracing::warn!(
            batch,
            reduce_tasks = reduce.len(),
            operators = names.len(),
            partitions,
            "the reduce task reports are not one per operator and state partition; the \
             batch's progress has no state by operator"
        );
        return Vec::new();
    }
    names
        .iter()
        .zip(reduce.chunks(partitions))
        .map(|(name, tasks)| OperatorState {
            name: name.to_string(),
            rows: tasks.iter().map(|o| o.state_rows).sum(),
            bytes: tasks.iter().map(|o| o.state_bytes).sum(),
        })
        .collect()
}

/// What the reduce tasks that rebuilt their state partition from an
/// earlier generation read, summed; the longest rebuild's time. `None`
/// when no task rebuilt one.
fn state_rebuild(reduce: &[pb::TaskOutput]) -> Option<StateRebuild> {
    let tasks = reduce.iter().filter_map(|o| o.state_rebuild.as_deref());
    tasks
        .map(StateRebuild::from_proto)
        .reduce(|a, b| StateRebuild {
            partitions: a.partitions + b.partitions,
            partitions_read: a.partitions_read + b.partitions_read,
            rows: a.rows + b.rows,
            duration_ms: a.duration_ms.max(b.duration_ms),
        })
}

/// The latest event time each input table's map tasks saw.
fn max_event_times(outputs: &Outputs) -> std::collections::BTreeMap<String, i64> {
    let mut out = std::collections::BTreeMap::new();
    for (table, o) in outputs.tables.iter().zip(&outputs.map) {
        if let Some(t) = o.max_event_time_ms {
            let e = out.entry(table.clone()).or_insert(t);
            *e = (*e).max(t);
        }
    }
    out
}

/// Fails the query, before batch `batch` commits, when its state would
/// hold more than its own budget (`max_state_bytes` of its spec): each
/// query is bounded by its own, never by another's.
fn check_state_budget(ctx: &Ctx, batch: u64, state_bytes: u64) -> Result<(), DriverError> {
    let budget = ctx.query.spec.max_state_bytes();
    if state_bytes <= budget {
        return Ok(());
    }
    Err(DriverError::LimitExceeded(format!(
        "query {}: batch {batch} would leave its state holding {state_bytes} bytes, above its \
         max_state_bytes {budget}; raise max_state_bytes in a new query, or bound the state \
         with a watermark",
        ctx.query.entry.name
    )))
}

/// When each phase of a batch started or how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    /// When the batch started (its planning, for a new batch).
    pub started: Instant,
    /// When the batch before it started, if any.
    pub previous: Option<Instant>,
    pub latest_offset: Duration,
    pub wal_commit: Duration,
    pub execution: Duration,
    pub sink_commit: Duration,
    pub commit: Duration,
}

/// The progress report of committed batch `offsets.batch_id`.
pub fn progress(
    ctx: &Ctx,
    streams: &Streams,
    offsets: &OffsetRecord,
    outcome: &Outcome,
    phases: &Phases,
) -> pb::BatchProgress {
    let total = phases.started.elapsed();
    let secs = |d: Duration| d.as_secs_f64().max(1e-6);
    let since_previous = phases
        .previous
        .map_or(total, |p| phases.started.duration_since(p));
    let ms = |d: Duration| d.as_millis() as u64;
    let from_source = streams.progress(&offsets.inputs);
    let input_rows = outcome.input_rows;
    pb::BatchProgress {
        id: ctx.query.entry.id.clone(),
        name: ctx.query.entry.name.clone(),
        batch_id: offsets.batch_id,
        num_input_rows: input_rows,
        input_rows_per_second: input_rows as f64 / secs(since_previous),
        processed_rows_per_second: input_rows as f64 / secs(total),
        duration_ms: Some(pb::Durations {
            latest_offset: ms(phases.latest_offset),
            wal_commit: ms(phases.wal_commit),
            execution: ms(phases.execution),
            sink_commit: ms(phases.sink_commit),
            commit: ms(phases.commit),
            total: ms(total),
            map: ms(outcome.map_time),
            reduce: ms(outcome.reduce_time),
        }),
        timestamp_ms: offsets.batch_timestamp_ms,
        epoch: ctx.query.term.epoch,
        skipped_before: 0,
        bad_records: outcome.bad_records,
        state_rows_total: outcome.state_rows_total,
        state_bytes: outcome.state_bytes,
        state_expired: outcome.state_expired,
        watermark_ms: offsets.watermark_ms,
        rows_dropped_by_watermark: outcome.rows_dropped_by_watermark,
        records_lost: from_source.records_lost + outcome.records_lost,
        num_output_rows: outcome.rows,
        sink_bytes: outcome.written.bytes,
        kafka_transactions: None,
        state_operators: outcome
            .state_operators
            .iter()
            .map(OperatorState::to_proto)
            .collect(),
        rows_without_event_time: outcome.rows_without_event_time,
        state_rebuild: outcome.state_rebuild.map(StateRebuild::to_proto),
        partitions: from_source
            .partitions
            .iter()
            .map(|p| p.to_proto())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(rows: u64, bytes: u64) -> pb::TaskOutput {
        pb::TaskOutput {
            state_rows: rows,
            state_bytes: bytes,
            ..Default::default()
        }
    }

    #[test]
    fn each_operator_sums_its_own_partitions() {
        let reduce = [task(1, 10), task(2, 20), task(30, 300), task(40, 400)];
        let state = |name: &str, rows, bytes| OperatorState {
            name: name.into(),
            rows,
            bytes,
        };
        assert_eq!(
            by_operator(3, &reduce, &["aggregate", "aggregate-2"], 2),
            [state("aggregate", 3, 30), state("aggregate-2", 70, 700)]
        );
        // Reports that are not one per operator and partition: none.
        assert_eq!(by_operator(3, &reduce[..3], &["aggregate", "join"], 2), []);
        assert_eq!(by_operator(3, &[], &["aggregate"], 0), []);
    }

    #[test]
    fn the_rebuilt_partitions_are_summed_and_the_longest_rebuild_kept() {
        let rebuilt = |read, rows, ms| pb::TaskOutput {
            state_rebuild: Some(Box::new(pb::StateRebuild {
                partitions: 1,
                partitions_read: read,
                rows,
                duration_ms: ms,
            })),
            ..Default::default()
        };
        let reduce = [rebuilt(4, 2, 30), task(1, 10), rebuilt(4, 5, 80)];
        let want = StateRebuild {
            partitions: 2,
            partitions_read: 8,
            rows: 7,
            duration_ms: 80,
        };
        assert_eq!(state_rebuild(&reduce), Some(want));
        assert_eq!(state_rebuild(&[task(1, 10)]), None, "nothing rebuilt");
    }
}
