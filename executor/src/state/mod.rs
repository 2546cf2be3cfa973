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
//!
//! The states live in the executor's local store ([`local`]), which keeps
//! at most `--state-memory-bytes` of them in memory and the rest on local
//! disk: a cache of the checkpoint, which can be lost at any time.

pub mod codec;
pub mod local;
mod memo;
pub mod rescale;
pub mod rows;
pub mod table;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_schema::SchemaRef;
use sluice_common::state::{StateFile, StateStore, rebuild};

use crate::error::ExecutorError;
use local::{LocalConfig, LocalStore};
use table::StateTable;

/// The partitions' states held, by (query id, partition).
#[derive(Debug, Default)]
pub struct States {
    held: Mutex<HashMap<(String, u32), StateTable>>,
    config: LocalConfig,
    /// Opened by the first stateful task.
    local: Mutex<Option<Arc<LocalStore>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("state cache lock poisoned")
}

impl States {
    /// States kept in a local store configured by `config`.
    pub fn new(config: LocalConfig) -> Self {
        States {
            config,
            ..Default::default()
        }
    }

    /// An empty state for state rows of `schema` keyed by the first `keys`
    /// columns, in a keyspace of its own.
    pub fn empty(&self, schema: SchemaRef, keys: usize) -> Result<StateTable, ExecutorError> {
        self.table(schema, keys, false)
    }

    /// An empty state as [`States::empty`]; `stamped`: its rows are
    /// stored with the time of their key's last upsert (an operator whose
    /// keys expire, see `table_stamp.rs`).
    pub fn table(
        &self,
        schema: SchemaRef,
        keys: usize,
        stamped: bool,
    ) -> Result<StateTable, ExecutorError> {
        StateTable::new(self.local()?.space(), schema, keys, stamped)
    }

    /// The local store, opened on first use (blocking, once).
    fn local(&self) -> Result<Arc<LocalStore>, ExecutorError> {
        let mut local = lock(&self.local);
        if let Some(l) = local.as_ref() {
            return Ok(l.clone());
        }
        let opened = Arc::new(LocalStore::open(&self.config)?);
        *local = Some(opened.clone());
        Ok(opened)
    }

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
/// latest snapshot at or below it, then the deltas after it, read at once
/// and merged into one load. Both hold stored rows (a stamped state's
/// with their stamps): `empty` says which.
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
    let read = plan.iter().map(|&f| store.read(operator, partition, f));
    let contents = futures::future::try_join_all(read).await?;
    let (mut snapshot, mut deltas) = (Vec::new(), Vec::new());
    for (file, bytes) in plan.into_iter().zip(contents) {
        let what = store.describe(operator, partition, file);
        match file {
            StateFile::Snapshot(_) => {
                snapshot = codec::decode(bytes, &table.stored_schema().clone(), &what)?;
            }
            StateFile::Delta(_) => {
                let rows = codec::decode(bytes, &table.delta_schema(), &what)?;
                deltas.push(table.read_delta(&rows)?);
            }
        }
    }
    table.rebuild(&snapshot, &deltas, version)?;
    Ok(table)
}

/// An empty state in a store of its own, for unit tests.
#[cfg(test)]
pub fn test_table(schema: SchemaRef, keys: usize) -> StateTable {
    States::new(on_disk())
        .empty(schema, keys)
        .expect("a local state store")
}

/// An empty state in a store of its own whose memory tier holds it, for
/// unit tests.
#[cfg(test)]
pub fn test_table_in_memory(schema: SchemaRef, keys: usize) -> StateTable {
    let config = LocalConfig {
        dir: None,
        memory_bytes: 1 << 30,
    };
    States::new(config)
        .empty(schema, keys)
        .expect("a local state store")
}

/// An empty stamped state in a store of its own, for unit tests.
#[cfg(test)]
pub fn test_stamped(schema: SchemaRef, keys: usize) -> StateTable {
    States::new(on_disk())
        .table(schema, keys, true)
        .expect("a local state store")
}

/// A local store with no memory tier: the states of the unit tests are in
/// the LSM store, whose reads and writes they check (the memory tier's are
/// checked against it in `local_space.rs`).
#[cfg(test)]
fn on_disk() -> LocalConfig {
    LocalConfig {
        dir: None,
        memory_bytes: 0,
    }
}
