//! The tasks of one batch, stage by stage.
//!
//! ```text
//!  stateless:  map task per source task ─► sink part files
//!  stateful:   map task per source task ─► shuffle/<N>/<map>.arrow, a range per (operator, side, bucket)
//!              for each operator, in order: a reduce task per state partition
//!                (its bucket of every file written for it, in the order written)
//!                ─► state/<op>/<p>/<N>.delta, and sink part files (the last operator)
//!                   or shuffle/<N>/<op + 1>-<p>.arrow for the operator it feeds
//! ```
//!
//! An operator's reduce stage starts once every task before it has
//! succeeded: a bucket's input is complete only then.

use std::time::{Duration, Instant};

use futures::future::try_join_all;
use sluice_common::checkpoint::{OffsetRecord, query_location};
use sluice_proto as pb;
use sluice_proto::task_assignment::Work;

use super::attempts;
use super::ctx::{Ctx, Operator, Query, Rebuilding, Stateful, StatefulOp};
use crate::error::DriverError;

/// How `query` runs its batches (`None` when its SQL keeps no state),
/// and the columns of its output. Its operators are
/// [`sluice_plan::plan`]'s, as the submit's check planned them. The SQL
/// was checked at submit; a failure here is an internal error.
pub async fn plan(
    query: &Query,
    tables: Option<&sluice_common::checkpoint::TablesRecord>,
    streams: &[(String, arrow_schema::SchemaRef)],
) -> Result<(Option<Stateful>, arrow_schema::SchemaRef), DriverError> {
    let tables: Vec<(String, arrow_schema::SchemaRef)> = tables
        .iter()
        .flat_map(|r| &r.tables)
        .map(|(n, t)| (n.clone(), std::sync::Arc::new(t.schema.clone())))
        .collect();
    let budget = query.driver.config.sql_plan_budget;
    let checked = loop {
        // Busy planning threads free up: wait for one.
        match sluice_sql::check(query.spec.sql(), streams, &tables, budget).await {
            Err(e @ sluice_sql::SqlError::Busy(_)) => {
                tracing::warn!(error = %e, "planning the query's SQL waits for a planning thread");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            checked => break checked,
        }
    }
    .map_err(|e| DriverError::Internal(format!("the query's SQL no longer plans: {e}")))?;
    let ops = sluice_plan::plan(&query.spec, &checked).map_err(|e| match e {
        sluice_plan::PlanError::Invalid(why) => DriverError::Invalid(why),
        sluice_plan::PlanError::Internal(why) => DriverError::Internal(why),
    })?;
    if ops.is_empty() {
        return Ok((None, checked.output));
    }
    let checkpoint = query_location(&query.driver.config.checkpoint_root, &query.entry.name);
    let store = query
        .storage("open state store", || async {
            sluice_common::state::StateStore::open(&query.driver.config.stores, &checkpoint)
        })
        .await?;
    let rescales = query
        .storage("read rescales", || async { query.qc.rescales().await })
        .await?;
    let generation = rescales.last().map_or(0, |r| r.generation);
    let rescales = rescales.iter().map(|r| r.rescale()).collect();
    let stateful = Stateful {
        store: store.in_generation(generation),
        checkpoint,
        rescales,
        partitions: query.spec.state_partitions(),
        snapshot_interval: query.spec.snapshot_interval(),
        ops,
    };
    Ok((Some(stateful), checked.output))
}

/// What the tasks of a batch reported.
#[derive(Debug, Default)]
pub struct Outputs {
    /// The map tasks, which read the input.
    pub map: Vec<pb::TaskOutput>,
    /// The input table each map task read, in the same order.
    pub tables: Vec<String>,
    /// The reduce tasks of a stateful query, operator by operator.
    pub reduce: Vec<pb::TaskOutput>,
    /// Where the last operator's reduce tasks, which wrote the output,
    /// start in `reduce`.
    pub last: usize,
    pub map_time: Duration,
    pub reduce_time: Duration,
    /// Failed attempts of the tasks that wrote the output (each retried:
    /// a Kafka transaction such an attempt left open, its retry aborted).
    pub writer_retries: u64,
}

impl Outputs {
    /// The tasks that wrote sink files.
    pub fn writers(&self) -> &[pb::TaskOutput] {
        if self.reduce.is_empty() {
            &self.map
        } else {
            &self.reduce[self.last..]
        }
    }
}

/// Runs the batch's tasks: `inputs` are the source's tasks, `plan` what
/// each runs.
pub async fn run(
    ctx: &Ctx,
    offsets: &OffsetRecord,
    inputs: Vec<crate::source::Task>,
    plan: &pb::TaskPlan,
) -> Result<Outputs, DriverError> {
    let tables: Vec<String> = inputs.iter().map(|(_, s)| s.table.clone()).collect();
    let t = Instant::now();
    let maps = inputs.into_iter().map(|(p, input)| {
        let work = match &ctx.stateful {
            None => Work::Map(pb::MapWork {}),
            Some(s) => Work::ShuffleMap(pb::ShuffleMapWork {
                checkpoint: s.checkpoint.clone(),
                buckets: s.partitions,
                rows: Some(map_rows(s, &input.table)),
            }),
        };
        let mut task = attempts::task(ctx, offsets, work, p);
        task.event_time = event_time(ctx, offsets, Some(&input.table));
        task.source = Some(input);
        task.plan = Some(plan.clone());
        attempts::run(ctx, task)
    });
    let (map, map_retries): (Vec<_>, Vec<u32>) = try_join_all(maps).await?.into_iter().unzip();
    let map_time = t.elapsed();
    let Some(stateful) = &ctx.stateful else {
        return Ok(Outputs {
            map,
            tables,
            map_time,
            writer_retries: map_retries.iter().map(|&n| u64::from(n)).sum(),
            ..Default::default()
        });
    };
    let t = Instant::now();
    let mut shuffled: Vec<pb::ShuffleRange> = Vec::new();
    let outside = |r: &&pb::ShuffleRange| {
        r.bucket >= stateful.partitions || r.operator as usize >= stateful.ops.len()
    };
    if let Some(r) = map.iter().flat_map(|m| &m.shuffle).find(outside) {
        return Err(DriverError::Internal(format!(
            "batch {}: a map task shuffled to bucket {} of operator {}, of {} buckets and {} operators",
            offsets.batch_id,
            r.bucket,
            r.operator,
            stateful.partitions,
            stateful.ops.len()
        )));
    }
    for (m, table) in map.iter().zip(&tables) {
        shuffled.extend(m.shuffle.iter().map(|r| pb::ShuffleRange {
            table: table.clone(),
            ..r.clone()
        }));
    }
    let ttl = ctx.query.spec.state_ttl_ms.map(|ttl_ms| pb::StateTtl {
        ttl_ms,
        now_ms: ttl_now(ctx, offsets, &map, &tables),
    });
    let _rebuilding = Rebuilding::show(&ctx.query.entry, stateful.rebuilding(offsets.batch_id));
    let mut reduce = Vec::new();
    let (mut last, mut writer_retries) = (0, 0);
    for (index, op) in stateful.ops.iter().enumerate() {
        let tasks = (0..stateful.partitions).map(|b| {
            let work = op.operator.reduce(pb::StateWork {
                checkpoint: stateful.checkpoint.clone(),
                inputs: bucket(&shuffled, index as u32, b),
                operator: op.name.clone(),
                read_version: offsets.batch_id.checked_sub(1),
                snapshot_interval: stateful.snapshot_interval,
                index: index as u32,
                next_buckets: op.consumer.map_or(0, |_| stateful.partitions),
                generation: stateful.store.generation(),
                rescales: stateful.rescales.iter().map(|&r| r.into()).collect(),
                ttl: ttl.as_ref().filter(|_| op.ttl).cloned(),
            });
            let mut task = attempts::task(ctx, offsets, work, b);
            task.event_time = event_time(ctx, offsets, None);
            task.plan = Some(plan.clone());
            attempts::run(ctx, task)
        });
        let (outputs, retries): (Vec<_>, Vec<u32>) = try_join_all(tasks).await?.into_iter().unzip();
        writer_retries = retries.iter().map(|&n| u64::from(n)).sum();
        last = reduce.len();
        for o in &outputs {
            shuffled.extend(o.shuffle.iter().cloned());
        }
        reduce.extend(outputs);
    }
    Ok(Outputs {
        map,
        tables,
        reduce,
        last,
        map_time,
        reduce_time: t.elapsed(),
        writer_retries,
    })
}

/// The time that batch `offsets`' state keys expire by (`pb::StateTtl`):
/// without a watermark, the batch's planned timestamp (processing time);
/// with watermarks, the query's watermark after the batch: for each
/// watermarked input, its planned watermark or the latest event time of
/// the batch's rows of it (its map tasks' reports, `map` reading `tables`)
/// less its delay, whichever is later; the least of those over the inputs.
/// `i64::MIN` while an input has seen no event time: nothing expires, and
/// a key stamped then expires at the first batch with a watermark unless
/// that batch updates it.
///
/// Invariant: a function of the batch's plan and its map tasks' outputs,
/// which a re-run batch reads again the same: its stamps and expiries are
/// the same.
fn ttl_now(ctx: &Ctx, offsets: &OffsetRecord, map: &[pb::TaskOutput], tables: &[String]) -> i64 {
    if !ctx.query.spec.has_watermark() {
        return offsets.batch_timestamp_ms;
    }
    let after = |planned: Option<i64>, table: Option<&str>, delay_ms: u64| {
        let latest = map
            .iter()
            .zip(tables)
            .filter(|(_, t)| table.is_none_or(|n| n == t.as_str()))
            .filter_map(|(o, _)| o.max_event_time_ms)
            .max();
        let delay = i64::try_from(delay_ms).unwrap_or(i64::MAX);
        planned.max(latest.map(|l| l.saturating_sub(delay)))
    };
    let now = match &ctx.query.spec.watermark {
        Some(w) => after(offsets.watermark_ms, None, w.delay_ms),
        None => ctx
            .query
            .spec
            .watermarks
            .iter()
            .map(|(name, w)| {
                after(
                    offsets.watermarks.get(name).copied(),
                    Some(name),
                    w.delay_ms,
                )
            })
            .collect::<Option<Vec<i64>>>()
            .and_then(|each| each.into_iter().min()),
    };
    now.unwrap_or(i64::MIN)
}

/// What a map task reading stream `table` shuffles: the rows of each
/// operator side that reads it (or the query's rows, for dedup).
fn map_rows(s: &Stateful, table: &str) -> pb::shuffle_map_work::Rows {
    use pb::shuffle_map_work::Rows;
    if let [
        StatefulOp {
            operator: Operator::Dedup(d),
            ..
        },
    ] = s.ops.as_slice()
    {
        return Rows::Dedup(d.clone());
    }
    let mut sides = Vec::new();
    for (i, op) in s.ops.iter().enumerate() {
        for (side, source) in op.sources.iter().enumerate() {
            if matches!(source, sluice_sql::Source::Streams(names) if names.iter().any(|n| n == table))
            {
                sides.push(pb::OperatorSide {
                    operator: i as u32,
                    side: side as u32,
                });
            }
        }
    }
    Rows::Sides(pb::OperatorSides { sides })
}

/// What a task is told of event time: the batch's watermark (the
/// query's), with the event time column of the input table it reads (a
/// map task's `table`), or of the query's one input (a reduce task of a
/// query with `source:`; empty for one with `sources:`). `None` when the
/// query has no watermark, and for a map task of an input without one.
fn event_time(ctx: &Ctx, offsets: &OffsetRecord, table: Option<&str>) -> Option<pb::EventTime> {
    if !ctx.query.spec.has_watermark() {
        return None;
    }
    let column = match table {
        // A map task of an input without a watermark drops nothing.
        Some(t) => ctx.query.spec.input(t)?.watermark?.column.clone(),
        None => ctx
            .query
            .spec
            .watermark
            .as_ref()
            .map(|w| w.column.clone())
            .unwrap_or_default(),
    };
    Some(pb::EventTime {
        column,
        watermark_ms: offsets.watermark_ms,
    })
}

/// The byte ranges for bucket `b` of operator `op`, in the order they
/// were written: map tasks in map order, then the reduce tasks of the
/// operators that feed it, by partition.
pub fn bucket(shuffled: &[pb::ShuffleRange], op: u32, b: u32) -> Vec<pb::ShuffleRange> {
    shuffled
        .iter()
        .filter(|r| r.operator == op && r.bucket == b)
        .cloned()
        .collect()
}
