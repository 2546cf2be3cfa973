//! The tasks of one batch, stage by stage.
//!
//! ```text
//!  stateless:  map task per source task ─► sink part files
//!  stateful:   map task per source task ─► shuffle/<N>/<map>.arrow, a byte range per bucket
//!              reduce task per state partition (its bucket of every map file, in map order)
//!                ─► state/<op>/<p>/<N>.delta and sink part files
//! ```
//!
//! The reduce stage starts once every map task has succeeded: a bucket's
//! input is complete only then.

use std::time::{Duration, Instant};

use futures::future::try_join_all;
use sluice_common::checkpoint::{OffsetRecord, query_location};
use sluice_proto as pb;
use sluice_proto::task_assignment::Work;

use super::attempts;
use super::ctx::{Ctx, Operator, Stateful};
use crate::error::DriverError;
use sluice_common::spec::OutputMode;

/// How the query of `ctx` runs its batches: `None` when its SQL keeps no
/// state. The SQL was checked at submit; a failure here is an internal
/// error.
pub async fn plan(
    ctx: &Ctx,
    streams: &[(String, arrow_schema::SchemaRef)],
) -> Result<Option<Stateful>, DriverError> {
    let tables: Vec<(String, arrow_schema::SchemaRef)> = ctx
        .tables
        .iter()
        .flat_map(|r| &r.tables)
        .map(|(n, t)| (n.clone(), std::sync::Arc::new(t.schema.clone())))
        .collect();
    let budget = ctx.driver.config.sql_plan_budget;
    let checked = loop {
        // Busy planning threads free up: wait for one.
        match sluice_sql::check(ctx.spec.sql(), streams, &tables, budget).await {
            Err(e @ sluice_sql::SqlError::Busy(_)) => {
                tracing::warn!(error = %e, "planning the query's SQL waits for a planning thread");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            checked => break checked,
        }
    }
    .map_err(|e| DriverError::Internal(format!("the query's SQL no longer plans: {e}")))?;
    let dedup = ctx.spec.dedup.as_ref().map(|d| pb::Dedup {
        columns: d.columns.clone(),
        within_ms: d.within_ms,
    });
    let join = checked
        .join
        .as_ref()
        .map(|j| Operator::Join(evictable(ctx, j)));
    let mode = OutputMode::effective(ctx.spec.output_mode, true);
    let top_n = checked.top_n.as_ref().map(|_| Operator::TopN(mode));
    if checked.keys.is_none() && dedup.is_none() && join.is_none() && top_n.is_none() {
        return Ok(None);
    }
    let checkpoint = query_location(&ctx.driver.config.checkpoint_root, &ctx.entry.name);
    let store = ctx
        .storage("open state store", || async {
            sluice_common::state::StateStore::open(&ctx.driver.config.stores, &checkpoint)
        })
        .await?;
    Ok(Some(Stateful {
        store,
        checkpoint,
        partitions: ctx.spec.state_partitions(),
        snapshot_interval: ctx.spec.snapshot_interval(),
        operator: match (dedup, join.or(top_n)) {
            (_, Some(op)) => op,
            (Some(d), None) => Operator::Dedup(d),
            (None, None) => Operator::Aggregate(mode),
        },
    }))
}

/// Whether each side's buffered rows may leave the state by the join's
/// bound: the other side has a watermark on the bound's time column, so
/// that no row of it that could still match arrives later.
pub fn evictable(ctx: &Ctx, join: &sluice_sql::JoinInfo) -> [bool; 2] {
    let Some((bound, columns)) = &join.bound else {
        return [false, false];
    };
    let watermarked = |side: usize| {
        ctx.spec
            .input(&join.streams[side])
            .and_then(|i| i.watermark)
            .is_some_and(|w| w.column == columns[side])
    };
    [
        bound.upper_ms.is_some() && watermarked(1),
        bound.lower_ms.is_some() && watermarked(0),
    ]
}

/// What the tasks of a batch reported.
#[derive(Debug, Default)]
pub struct Outputs {
    /// The map tasks, which read the input.
    pub map: Vec<pb::TaskOutput>,
    /// The input table each map task read, in the same order.
    pub tables: Vec<String>,
    /// The reduce tasks of a stateful query, which wrote the output.
    pub reduce: Vec<pb::TaskOutput>,
    pub map_time: Duration,
    pub reduce_time: Duration,
}

impl Outputs {
    /// The tasks that wrote sink files.
    pub fn writers(&self) -> &[pb::TaskOutput] {
        if self.reduce.is_empty() {
            &self.map
        } else {
            &self.reduce
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
    let work = match &ctx.stateful {
        None => Work::Map(pb::MapWork {}),
        Some(s) => Work::ShuffleMap(pb::ShuffleMapWork {
            checkpoint: s.checkpoint.clone(),
            buckets: s.partitions,
            rows: Some(s.operator.shuffled()),
        }),
    };
    let maps = inputs.into_iter().map(|(p, input)| {
        let mut task = attempts::task(ctx, offsets, work.clone(), p);
        task.event_time = event_time(ctx, offsets, Some(&input.table));
        task.source = Some(input);
        task.plan = Some(plan.clone());
        attempts::run(ctx, task)
    });
    let map = try_join_all(maps).await?;
    let map_time = t.elapsed();
    let Some(stateful) = &ctx.stateful else {
        return Ok(Outputs {
            map,
            tables,
            map_time,
            ..Default::default()
        });
    };
    if let Some(m) = map
        .iter()
        .find(|m| m.shuffle.len() != stateful.partitions as usize)
    {
        return Err(DriverError::Internal(format!(
            "batch {}: a map task reported {} shuffle buckets, not {}",
            offsets.batch_id,
            m.shuffle.len(),
            stateful.partitions
        )));
    }
    let t = Instant::now();
    let reduces = (0..stateful.partitions).map(|b| {
        let work = stateful.operator.reduce(pb::StateWork {
            checkpoint: stateful.checkpoint.clone(),
            inputs: bucket(&map, &tables, b),
            operator: stateful.operator.name().into(),
            read_version: offsets.batch_id.checked_sub(1),
            snapshot_interval: stateful.snapshot_interval,
        });
        let mut task = attempts::task(ctx, offsets, work, b);
        task.event_time = event_time(ctx, offsets, None);
        task.plan = Some(plan.clone());
        attempts::run(ctx, task)
    });
    let reduce = try_join_all(reduces).await?;
    Ok(Outputs {
        map,
        tables,
        reduce,
        map_time,
        reduce_time: t.elapsed(),
    })
}

/// What a task is told of event time: the batch's watermark (the
/// query's), with the event time column of the input table it reads (a
/// map task's `table`), or of the query's one input (a reduce task of a
/// query with `source:`; empty for one with `sources:`). `None` when the
/// query has no watermark, and for a map task of an input without one.
fn event_time(ctx: &Ctx, offsets: &OffsetRecord, table: Option<&str>) -> Option<pb::EventTime> {
    if !ctx.spec.has_watermark() {
        return None;
    }
    let column = match table {
        // A map task of an input without a watermark drops nothing.
        Some(t) => ctx.spec.input(t)?.watermark?.column.clone(),
        None => ctx
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

/// Bucket `b`'s byte range of every map task's shuffle file, in map order,
/// each with the stream table its map task read (`tables`, in the same
/// order).
pub fn bucket(maps: &[pb::TaskOutput], tables: &[String], b: u32) -> Vec<pb::ShuffleRange> {
    maps.iter()
        .zip(tables)
        .filter_map(|(m, table)| {
            let mut range = m.shuffle.get(b as usize).cloned()?;
            range.table = table.clone();
            Some(range)
        })
        .collect()
}
