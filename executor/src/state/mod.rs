//! The state an executor keeps between a stateful query's batches.
//!
//! ```text
//!  reduce task (query, partition, reads version V)
//!     ├─ held here at version V ─► take it (affinity: no storage read)
//!     └─ otherwise ─► load: latest snapshot ≤ V, then each delta after it
//! ```
//!
//! A task takes its partition's state out of [`States`] and puts the next
//! version back when it succeeds, so a failed or abandoned task leaves
//! nothing half-applied behind: the next one reloads from storage. The
//! bytes held are bounded by `--max-state-bytes`: other partitions' states
//! are dropped to make room for the one a task holds.

pub mod codec;
pub mod table;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use arrow_schema::SchemaRef;
use sluice_common::state::{StateFile, StateStore, rebuild};

use crate::error::ExecutorError;
use table::StateTable;

/// The partitions' states held in memory, by (query id, partition).
#[derive(Debug, Default)]
pub struct States {
    held: Mutex<HashMap<(String, u32), StateTable>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("state cache lock poisoned")
}

impl States {
    /// Takes the state of `partition` if it is held at `version`. A state
    /// held at another version is dropped: it is of no use to anyone.
    pub fn take(&self, query: &str, partition: u32, version: Option<u64>) -> Option<StateTable> {
        let held = lock(&self.held).remove(&(query.to_string(), partition))?;
        (held.version == version).then_some(held)
    }

    /// Keeps a partition's new state version.
    pub fn put(&self, query: &str, partition: u32, table: StateTable) {
        lock(&self.held).insert((query.to_string(), partition), table);
    }

    /// Drops the states held for other partitions, largest first, until
    /// those left hold at most `room` bytes; the number dropped. A dropped
    /// state costs its next task a reload from storage, never a result.
    pub fn make_room(&self, query: &str, partition: u32, room: usize) -> usize {
        let mut held = lock(&self.held);
        let mut others: Vec<((String, u32), usize)> = held
            .iter()
            .filter(|(k, _)| !(k.0 == query && k.1 == partition))
            .map(|(k, t)| (k.clone(), t.bytes()))
            .collect();
        others.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
        let mut total: usize = others.iter().map(|(_, b)| b).sum();
        let mut dropped = 0;
        for (key, bytes) in others {
            if total <= room {
                break;
            }
            held.remove(&key);
            total -= bytes;
            dropped += 1;
        }
        dropped
    }
}

/// State version `version` of one partition, rebuilt from storage: the
/// latest snapshot at or below it, then the deltas after it.
pub async fn load(
    store: &StateStore,
    operator: &str,
    partition: u32,
    empty: StateTable,
    version: u64,
) -> Result<StateTable, ExecutorError> {
    let mut table = empty;
    let files = store.files(operator, partition).await?;
    let plan = rebuild(&files, version).map_err(|reason| sluice_common::Error::Corrupt {
        path: store.describe(operator, partition, StateFile::Delta(version)),
        reason: format!("state version {version} cannot be rebuilt: {reason}"),
    })?;
    for file in plan {
        let bytes = store.read(operator, partition, file).await?;
        let what = store.describe(operator, partition, file);
        match file {
            StateFile::Snapshot(v) => {
                let rows = codec::decode(bytes, &table.schema().clone(), &what)?;
                table.load(&rows, v)?;
            }
            StateFile::Delta(v) => {
                let rows = codec::decode(bytes, &table.delta_schema(), &what)?;
                let change = table.read_delta(&rows)?;
                table.apply(&change, v)?;
            }
        }
    }
    Ok(table)
}

/// An empty state for state rows of `schema` keyed by the first `keys`.
pub fn empty(schema: SchemaRef, keys: usize) -> Result<StateTable, ExecutorError> {
    StateTable::new(schema, keys)
}
