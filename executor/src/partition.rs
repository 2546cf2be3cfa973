//! A reduce task's state partition: the version it reads, held here
//! (affinity) or rebuilt from the checkpoint; the batch's change, the
//! rows the watermark passed and the keys that expired, applied and
//! written as its delta; its snapshot, in the background; the bound on
//! what the executor holds; and the new version kept for the next batch.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_common::state::{StateFile, StateStore};
use sluice_proto::{StateWork, TaskAssignment};
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::output;
use crate::state::codec;
use crate::state::rescale::{self, Place, Rebuilt, Repartition};
use crate::state::table::{Change, FrozenState, StateTable};

/// The state of the task's partition at the version it reads: the one
/// this executor holds (affinity), or one rebuilt from storage; with what
/// rebuilding it from an earlier state generation read, if it was. It is
/// stamped when the work's keys expire (`work.ttl`).
pub async fn state(
    caches: &Caches,
    store: &StateStore,
    task: &TaskAssignment,
    work: &StateWork,
    (schema, keys): (SchemaRef, usize),
    router: &dyn Repartition,
) -> Result<(StateTable, Rebuilt), ExecutorError> {
    let (owner, p, version) = (owner(task, work), task.partition, work.read_version);
    let stamped = work.ttl.is_some();
    if let Some(held) = caches.states.take(&owner, p, version) {
        // Invariant: a query's operator is stamped or not for its life
        // (its spec's state_ttl_ms never changes); a held state of the
        // other kind is not this operator's, and is rebuilt.
        if held.is_stamped() == stamped {
            return Ok((held, Rebuilt::default()));
        }
        warn!(
            partition = p,
            stamped, "a held state of another kind dropped; rebuilding it"
        );
    }
    let Some(v) = version else {
        let empty = caches.states.table(schema, keys, stamped)?;
        return Ok((empty, Rebuilt::default()));
    };
    let started = std::time::Instant::now();
    let place = Place {
        store,
        operator: &work.operator,
        rescales: &work.rescales,
        schema,
        keys,
        stamped,
    };
    let (table, rebuilt) = rescale::load(&caches.states, &place, p, v, router).await?;
    info!(
        partition = p,
        version = v,
        rows = table.len(),
        ms = started.elapsed().as_millis() as u64,
        "state reloaded from storage"
    );
    Ok((table, rebuilt))
}

/// What left a partition's state in a batch beside the operator's own
/// deletes.
#[derive(Debug)]
pub struct Left {
    /// The rows the watermark passed, which the operator emits from.
    pub evicted: RecordBatch,
    /// How many keys expired (idle for the spec's `state_ttl_ms`); they
    /// emit nothing.
    pub expired: u64,
}

/// Moves a partition's state to the batch's version: first the
/// operator's `change` (its upserts, then its deletes, keys that none of
/// the upserts has), then the deletes that `evict` picks from the state
/// that results (the rows the watermark has passed), then, when the
/// work's keys expire, the keys idle for its ttl. The delta file records
/// the upserts and all three deletes, and a reload applies them in the
/// same order (the deletes name distinct keys, none of them upserted but
/// the evicted ones, so one set of deletes after the upserts leaves the
/// same state).
///
/// Invariant: a stamped state's upserts carry the batch's `now_ms`, so a
/// key this batch upserted never expires in it.
pub async fn advance(
    table: &mut StateTable,
    store: &StateStore,
    task: &TaskAssignment,
    work: &StateWork,
    change: Change,
    evict: impl FnOnce(&StateTable) -> Result<Option<RecordBatch>, ExecutorError>,
) -> Result<Left, ExecutorError> {
    if let Some(ttl) = &work.ttl {
        table.set_now(ttl.now_ms);
    }
    table.apply(&change, task.batch_id)?;
    let none = RecordBatch::new_empty(change.upserts.schema());
    let evicted = evict(table)?.unwrap_or_else(|| none.clone());
    let evicting = Change {
        upserts: none.clone(),
        deletes: evicted.clone(),
    };
    table.apply(&evicting, task.batch_id)?;
    let expired = match &work.ttl {
        Some(ttl) => table.expired(ttl.ttl_ms, ttl.now_ms)?,
        None => none.clone(),
    };
    if expired.num_rows() > 0 {
        let expiring = Change {
            upserts: none,
            deletes: expired.clone(),
        };
        table.apply(&expiring, task.batch_id)?;
        debug!(
            partition = task.partition,
            expired = expired.num_rows(),
            ttl_ms = work.ttl.as_ref().map_or(0, |t| t.ttl_ms),
            now_ms = work.ttl.as_ref().map_or(0, |t| t.now_ms),
            "idle state keys expired"
        );
    }
    let deletes = arrow_select::concat::concat_batches(
        &evicted.schema(),
        [&change.deletes, &evicted, &expired],
    )
    .map_err(|e| ExecutorError::TaskPanicked(format!("state deletes: {e}")))?;
    let recorded = Change {
        upserts: change.upserts,
        deletes,
    };
    let delta = codec::encode(&table.delta_schema(), &[table.to_delta(&recorded)?])?;
    let file = StateFile::Delta(task.batch_id);
    store
        .write(&work.operator, task.partition, file, delta)
        .await?;
    Ok(Left {
        evicted,
        expired: expired.num_rows() as u64,
    })
}

/// A reduce task's result, once its output is written: the partition's
/// new state version is kept here for the next batch (affinity).
pub fn done(
    caches: &Caches,
    task: &TaskAssignment,
    table: StateTable,
    (emitted, delivered): (output::Emitted, output::Delivered),
    started: std::time::Instant,
) -> sluice_proto::TaskOutput {
    let out = sluice_proto::TaskOutput {
        rows: emitted.rows,
        sink: delivered,
        duration_ms: started.elapsed().as_millis() as u64,
        state_rows: table.len() as u64,
        state_bytes: table.bytes() as u64,
        ..Default::default()
    };
    if let Some(work) = task.state() {
        caches.states.put(&owner(task, work), task.partition, table);
    }
    out
}

/// Whose state a partition's is: a query's operator in one state
/// generation (partition P of another generation holds other keys).
fn owner(task: &TaskAssignment, work: &StateWork) -> String {
    format!("{}/{}/g{}", task.query_id, work.operator, work.generation)
}

/// Keeps the states this executor holds under `--max-state-bytes`: the
/// task's own partition first, dropping the other partitions' states to
/// make room. Only a partition whose state alone passes the bound fails,
/// with an error naming its query, rather than an executor killed for
/// memory: one query's state never fails another.
pub fn bound(
    caches: &Caches,
    task: &TaskAssignment,
    table: &StateTable,
) -> Result<(), ExecutorError> {
    let limit = caches.max_state_bytes();
    let own = table.bytes() as u64;
    if own > limit {
        return Err(ExecutorError::StateTooLarge {
            query: task.query_name.clone(),
            bytes: own,
            limit,
        });
    }
    let room = usize::try_from(limit - own).unwrap_or(usize::MAX);
    let owner = task
        .state()
        .map_or_else(|| task.query_id.clone(), |w| owner(task, w));
    let dropped = caches.states.make_room(&owner, task.partition, room);
    if dropped > 0 {
        tracing::info!(dropped, "state partitions dropped from memory to make room");
    }
    Ok(())
}

/// The state held, when its version is due a snapshot (every
/// `snapshot_interval` batches): its version, frozen.
pub fn due(
    work: &StateWork,
    table: &StateTable,
) -> Result<Option<(u64, FrozenState)>, ExecutorError> {
    let Some(v) = table.version else {
        return Ok(None);
    };
    if (v + 1) % work.snapshot_interval.max(1) != 0 {
        return Ok(None);
    }
    Ok(Some((v, table.freeze()?)))
}

/// Writes a snapshot in the background, off the batch's path: a task the
/// executor owns (see [`Caches::background`]), which a shutdown waits for
/// briefly. The batch that made the state has committed, since a later
/// batch is running; a snapshot that is never written costs a later reload
/// more deltas, never a wrong answer.
pub fn snapshot(
    caches: &Caches,
    store: &StateStore,
    work: &StateWork,
    p: u32,
    due: Option<(u64, FrozenState)>,
) {
    let Some((v, frozen)) = due else { return };
    let (store, operator) = (store.clone(), work.operator.clone());
    let turns = caches.snapshots.clone();
    let span = tracing::info_span!("snapshot", partition = p, version = v);
    let write = async move {
        let written = async {
            let _turn = turns
                .acquire()
                .await
                .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?;
            let encode = move || codec::encode_each(frozen.schema(), frozen.batches());
            let bytes = tokio::task::spawn_blocking(encode)
                .await
                .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
            store
                .write(&operator, p, StateFile::Snapshot(v), bytes)
                .await?;
            Ok::<_, ExecutorError>(())
        };
        if let Err(e) = written.await {
            warn!(error = %e, "state snapshot not written");
        }
    };
    caches
        .background
        .spawn(tracing::Instrument::instrument(write, span));
}
