//! A partition of a new state generation, rebuilt from an earlier one:
//! after a restart with other state partitions (see
//! `sluice_common::checkpoint::RescaleRecord`), partition P of generation
//! G at the version S G began from is every row of every partition of
//! the generation in which batch S committed whose key the shuffle now
//! routes to P. That is G-1, unless G-1 began at S too (restarted again
//! before a batch committed): such generations hold nothing of their own
//! and are passed over (`sluice_common::state::rebuild_source`), so a
//! chain of restarts costs one rebuild from the state's last partitioning.
//!
//! ```text
//!  load(G, P, V) ─► G began at S ≤ V, and no snapshot of G in S..=V?
//!     └─ yes ─► for each partition Q of the source: load(source, Q, S) ─► rows routed to P
//!               ─► gathered (the operator's ids made unique) ─► state/<op>/g<G>/<P>/<S>.snapshot
//!  ─► latest snapshot ≤ V, then each delta after it (as any load)
//! ```
//!
//! Invariant: the rows routed to P are those whose key the map tasks'
//! shuffle sends to P ([`Repartition::route`] hashes them as
//! `crate::shuffle::bucket` does), so later batches find them. The
//! snapshot written is in key order, so two tasks that rebuild the same
//! partition write the same bytes (create-only, same bytes accepted). A
//! stamped state's rows move with their stamps: they are routed (and
//! renumbered) as the operator's rows, and written as stored.

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::state::{Rescale, StateFile, StateStore, rebuild_source};
use sluice_proto::StateRescale;
use tracing::info;

use super::table::StateTable;
use super::{States, codec};
use crate::error::ExecutorError;

/// How an operator's state rows move between partitions.
pub trait Repartition: Send + Sync {
    /// The partition, of `partitions`, the shuffle routes each state row
    /// of `rows` to: the bucket of its row's shuffle key.
    fn route(&self, rows: &RecordBatch, partitions: u32) -> Result<Vec<u32>, ExecutorError>;

    /// State rows gathered from several partitions into one, made valid
    /// for it (keys that were unique only within a partition renumbered):
    /// the same rows, in the same order.
    fn gathered(&self, rows: RecordBatch) -> Result<RecordBatch, ExecutorError> {
        Ok(rows)
    }
}

/// What rebuilding a partition from an earlier generation read, as its
/// task reports it (`sluice_proto::StateRebuild`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Partitions of the new generation rebuilt: 0 or 1.
    pub partitions: u32,
    /// Partitions of earlier generations read to rebuild them.
    pub partitions_read: u64,
    /// The rows the rebuilt partition holds.
    pub rows: u64,
    pub ms: u64,
}

impl Rebuilt {
    pub fn to_proto(self) -> Option<Box<sluice_proto::StateRebuild>> {
        (self.partitions > 0).then(|| {
            Box::new(sluice_proto::StateRebuild {
                partitions: self.partitions,
                partitions_read: self.partitions_read,
                rows: self.rows,
                duration_ms: self.ms,
            })
        })
    }
}

/// Where one partition's state is, and how its generations began.
pub struct Place<'a> {
    pub store: &'a StateStore,
    pub operator: &'a str,
    pub rescales: &'a [StateRescale],
    pub schema: SchemaRef,
    pub keys: usize,
    /// Whether its rows are stored with their stamps (see
    /// `super::table::TOUCHED`).
    pub stamped: bool,
}

/// State version `version` of partition `partition` of `place`'s
/// generation, rebuilding its start from an earlier generation when it
/// has none (see the module's diagram), with what that rebuild read.
pub fn load<'a>(
    states: &'a States,
    place: &'a Place<'a>,
    partition: u32,
    version: u64,
    router: &'a dyn Repartition,
) -> BoxFuture<'a, Result<(StateTable, Rebuilt), ExecutorError>> {
    Box::pin(async move {
        let mut rebuilt = Rebuilt::default();
        let generation = place.store.generation();
        if generation > 0 {
            let began = place
                .rescales
                .iter()
                .find(|r| r.generation == generation)
                .ok_or_else(|| {
                    ExecutorError::MalformedTask(format!(
                        "state generation {generation} without the rescale that began it"
                    ))
                })?;
            if let Some(start) = began.state_version.filter(|&s| s <= version) {
                let files = place.store.files(place.operator, partition).await?;
                let has_start = files
                    .iter()
                    .any(|f| matches!(f, StateFile::Snapshot(v) if (start..=version).contains(v)));
                if !has_start {
                    rebuilt = gather(states, place, began, partition, start, router).await?;
                }
            }
        }
        let empty = states.table(place.schema.clone(), place.keys, place.stamped)?;
        let table = super::load(place.store, place.operator, partition, empty, version).await?;
        Ok((table, rebuilt))
    })
}

/// Writes partition `partition`'s snapshot at `start`, the version
/// generation `began` started from, from every partition of the
/// generation that holds that version (see the module's header).
async fn gather(
    states: &States,
    place: &Place<'_>,
    began: &StateRescale,
    partition: u32,
    start: u64,
    router: &dyn Repartition,
) -> Result<Rebuilt, ExecutorError> {
    let started = std::time::Instant::now();
    let rescales: Vec<Rescale> = place.rescales.iter().map(Rescale::from).collect();
    let source =
        rebuild_source(&rescales, began.generation).map_err(ExecutorError::MalformedTask)?;
    let store = place.store.in_generation(source.generation);
    let before = Place {
        store: &store,
        operator: place.operator,
        rescales: place.rescales,
        schema: place.schema.clone(),
        keys: place.keys,
        stamped: place.stamped,
    };
    let fail = |e: arrow_schema::ArrowError| ExecutorError::TaskPanicked(format!("rescale: {e}"));
    let mut rows = Vec::new();
    let mut read = 0;
    for q in 0..source.partitions {
        let (table, inner) = load(states, &before, q, start, router).await?;
        read += 1 + inner.partitions_read;
        let held = table.scan_stored()?;
        let routed = router.route(&table.view(&held)?, began.partitions)?;
        let keep: BooleanArray = routed.iter().map(|&p| Some(p == partition)).collect();
        let routed_here = arrow_select::filter::filter_record_batch(&held, &keep).map_err(fail)?;
        rows.push(routed_here);
    }
    let mut table = states.table(place.schema.clone(), place.keys, place.stamped)?;
    let rows = arrow_select::concat::concat_batches(table.stored_schema(), &rows).map_err(fail)?;
    let renumbered = router.gathered(table.view(&rows)?)?;
    let rows = table.with_stamps_of(renumbered, &rows)?;
    table.rebuild(std::slice::from_ref(&rows), &[], start)?;
    let frozen = table.freeze()?;
    let encode = move || codec::encode_each(frozen.schema(), frozen.batches());
    let bytes = tokio::task::spawn_blocking(encode)
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
    let file = StateFile::Snapshot(start);
    place
        .store
        .write(place.operator, partition, file, bytes)
        .await?;
    let rebuilt = Rebuilt {
        partitions: 1,
        partitions_read: read,
        rows: table.len() as u64,
        ms: started.elapsed().as_millis() as u64,
    };
    info!(
        operator = place.operator,
        partition,
        generation = began.generation,
        from_generation = source.generation,
        from_partitions = source.partitions,
        partitions_read = rebuilt.partitions_read,
        version = start,
        rows = rebuilt.rows,
        ms = rebuilt.ms,
        "state partition rebuilt from the partitions before a rescale"
    );
    Ok(rebuilt)
}
