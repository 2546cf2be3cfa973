//! What one query's runner works with, and the two ways it waits: for
//! time (ended early by a stop) and for storage (retried with backoff,
//! fenced on every attempt).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_common::checkpoint::QueryCheckpoint;
use sluice_common::spec::QuerySpec;
use sluice_proto as pb;
use tracing::warn;

pub use sluice_plan::{Operator, StatefulOp};

use super::retry::STORAGE_BACKOFF;
use crate::error::DriverError;
use crate::query::entry::QueryEntry;
use crate::state::{Driver, Term};

/// A running query's handles under this term: what every part of its
/// loop reaches through, before and after its [`Ctx`] is built.
#[derive(Clone)]
pub struct Query {
    pub driver: Arc<Driver>,
    pub term: Arc<Term>,
    pub entry: Arc<QueryEntry>,
    pub spec: QuerySpec,
    pub qc: QueryCheckpoint,
}

impl Query {
    /// Runs a storage operation of this term (see [`retried`]).
    pub async fn storage<T, F, Fut>(&self, what: &str, op: F) -> Result<T, DriverError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = sluice_common::Result<T>>,
    {
        retried(&self.term, &self.entry, what, op).await
    }
}

/// Everything a runner works with: built once, when the runner starts,
/// before its first batch (see `runner::open`); nothing in it changes.
pub struct Ctx {
    pub query: Query,
    /// What every task of the query runs (the tables' files are set per
    /// batch).
    pub plan: pb::TaskPlan,
    /// What every writing task is told of the sink.
    pub sink: pb::TaskSink,
    /// The static tables' schemas and places, when the query has tables.
    pub tables: Option<sluice_common::checkpoint::TablesRecord>,
    /// How a stateful query's batches run; `None` for a stateless query.
    pub stateful: Option<Stateful>,
}

/// How a stateful query's batches run, fixed when its runner starts.
#[derive(Debug, Clone)]
pub struct Stateful {
    /// The query's checkpoint directory, where shuffle and state files go.
    pub checkpoint: String,
    pub partitions: u32,
    pub snapshot_interval: u64,
    /// Its operators, in the order they run (see [`sluice_plan::plan`]).
    pub ops: Vec<StatefulOp>,
    /// The shuffle and state files under `checkpoint`, in the query's
    /// current state generation.
    pub store: sluice_common::state::StateStore,
    /// How each state generation after the first began (see
    /// `sluice_common::checkpoint::RescaleRecord`).
    pub rescales: Vec<sluice_common::state::Rescale>,
}

impl Stateful {
    /// The operator whose output goes to the sink.
    pub fn last(&self) -> &StatefulOp {
        self.ops.last().expect("a stateful query has an operator")
    }

    /// What batch `batch` rebuilds of the state, if it is the first of a
    /// state generation that began from a committed version: its reduce
    /// tasks rebuild their partitions from an earlier generation's (see
    /// [`rebuilding`]).
    pub fn rebuilding(&self, batch: u64) -> Option<pb::StateRebuilding> {
        let generation = self.store.generation();
        rebuilding(&self.rescales, generation, self.partitions, batch)
    }
}

/// Whether batch `batch` of generation `generation` (of `partitions`
/// partitions) rebuilds the state: it reads the version the generation
/// began from, and that version holds state. Whose partitions it reads:
/// `sluice_common::state::rebuild_source`. A generation whose rescales
/// are incomplete rebuilds nothing here (its tasks report the damage).
pub fn rebuilding(
    rescales: &[sluice_common::state::Rescale],
    generation: u64,
    partitions: u32,
    batch: u64,
) -> Option<pb::StateRebuilding> {
    let began = rescales.iter().find(|r| r.generation == generation)?;
    let start = began.state_version?;
    if batch.checked_sub(1) != Some(start) {
        return None;
    }
    let source = match sluice_common::state::rebuild_source(rescales, generation) {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, generation, "the state generation's rescales are incomplete");
            return None;
        }
    };
    Some(pb::StateRebuilding {
        batch_id: batch,
        generation,
        partitions,
        from_generation: source.generation,
        from_partitions: source.partitions,
        elapsed_ms: 0,
    })
}

impl Ctx {
    /// Sleeps unless the query is stopped or the term ends first.
    pub async fn sleep(&self, d: Duration) -> Result<(), DriverError> {
        sleep(&self.query.entry, d).await
    }

    /// Runs a storage operation of this term (see [`retried`]).
    pub async fn storage<T, F, Fut>(&self, what: &str, op: F) -> Result<T, DriverError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = sluice_common::Result<T>>,
    {
        self.query.storage(what, op).await
    }
}

/// Sleeps unless `entry`'s query is stopped first.
pub async fn sleep(entry: &QueryEntry, d: Duration) -> Result<(), DriverError> {
    if d.is_zero() {
        return Ok(());
    }
    tokio::select! {
        biased;
        _ = entry.stop.cancelled() => Err(DriverError::Cancelled),
        _ = tokio::time::sleep(d) => Ok(()),
    }
}

/// Runs a storage operation of `term` for `entry`'s query, retrying
/// retryable errors with backoff for as long as they last; the error shows
/// in the query's status meanwhile. Each attempt first checks the term's
/// fence.
pub async fn retried<T, F, Fut>(
    term: &Term,
    entry: &QueryEntry,
    what: &str,
    mut op: F,
) -> Result<T, DriverError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = sluice_common::Result<T>>,
{
    let mut streak = 0u32;
    loop {
        // A term that may no longer commit touches nothing (fencing).
        term.fence()?;
        match op().await {
            Ok(v) => {
                if streak > 0 {
                    entry.set_error(String::new());
                }
                return Ok(v);
            }
            Err(e) if e.is_retryable() => {
                warn!(error = %e, what, attempt = streak + 1, "storage error; retrying");
                entry.set_error(format!("{what}: {e} (retrying)"));
                sleep(entry, STORAGE_BACKOFF.delay(streak)).await?;
                streak += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Shows a batch's rebuild of the state in its query's status while its
/// reduce stages run, however they end.
pub struct Rebuilding<'a>(Option<&'a QueryEntry>);

impl<'a> Rebuilding<'a> {
    pub fn show(entry: &'a QueryEntry, rebuilding: Option<pb::StateRebuilding>) -> Self {
        let Some(r) = rebuilding else {
            return Rebuilding(None);
        };
        tracing::info!(
            batch = r.batch_id,
            generation = r.generation,
            from_generation = r.from_generation,
            from_partitions = r.from_partitions,
            "the batch rebuilds the state after a rescale"
        );
        entry.set_rebuilding(Some(r));
        Rebuilding(Some(entry))
    }
}

impl Drop for Rebuilding<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.0 {
            entry.set_rebuilding(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_common::state::Rescale;

    #[test]
    fn the_first_batch_of_a_rescaled_generation_rebuilds_from_the_last_that_committed() {
        let r = |generation, previous_partitions, partitions| Rescale {
            generation,
            state_version: Some(7),
            previous_partitions,
            partitions,
        };
        let chain = [r(1, 4, 1), r(2, 1, 64), r(3, 64, 5)];
        let got = rebuilding(&chain, 3, 5, 8).expect("batch 8 reads version 7");
        assert_eq!(
            (
                got.generation,
                got.partitions,
                got.from_generation,
                got.from_partitions
            ),
            (3, 5, 0, 4)
        );
        assert_eq!(rebuilding(&chain, 3, 5, 9), None, "a later batch");
        assert_eq!(rebuilding(&chain, 0, 4, 8), None, "no rescale");
        let empty = Rescale {
            state_version: None,
            ..r(1, 4, 2)
        };
        assert_eq!(rebuilding(&[empty], 1, 2, 0), None, "nothing committed");
    }
}
