//! What an executor keeps between tasks: opened file sinks and state
//! stores, stateful queries' state ([`States`]), and the static
//! tables it has loaded, keyed by the table's plan (its schema and the
//! files with their sizes and modification times), so a table is read
//! again only when a batch names other files.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use sluice_common::secrets::Secrets;
use sluice_common::sink::FileSink;
use sluice_common::state::StateStore;
use sluice_common::storage::{AllowedPaths, Stores};
use sluice_proto::TablePlan;
use sluice_sql::Table;

use crate::error::ExecutorError;
use crate::source::{Columns, ReadCounters, SourceReader, files::FilesReader};
use crate::state::States;

/// Loaded tables kept (the most recently used).
const TABLES_KEPT: usize = 8;

#[derive(Debug)]
pub struct Caches {
    sinks: Mutex<HashMap<String, FileSink>>,
    tables: Mutex<VecDeque<(String, Arc<Vec<RecordBatch>>)>>,
    stores: Mutex<HashMap<String, StateStore>>,
    /// Stateful queries' partitions held in memory.
    pub states: States,
    /// Work that outlives a task, off its path: state snapshots.
    pub background: tokio_util::task::TaskTracker,
    /// One snapshot is encoded at a time: snapshots due at the same batch
    /// (every partition's, at once) take turns, off the batches' cores
    /// and within the memory of one.
    pub snapshots: Arc<tokio::sync::Semaphore>,
    /// The most state bytes held at once (`--max-state-bytes`); 0 is
    /// unbounded.
    max_state_bytes: u64,
    /// The memory pool of one task's query operators
    /// (`--max-task-memory-bytes`); `None` is unbounded.
    task_memory: Option<usize>,
    /// Opens sources, tables, sinks and state.
    pub storage: Stores,
    /// Where tasks may read and write (`--allowed-paths`); `None` does not
    /// confine.
    pub allowed: Option<AllowedPaths>,
    /// Which files and variables tasks' Kafka settings may name
    /// (`--secrets-dir`, `--secret-env-prefix`); by default none.
    pub secrets: Secrets,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            sinks: Default::default(),
            tables: Default::default(),
            stores: Default::default(),
            states: Default::default(),
            background: Default::default(),
            snapshots: Arc::new(tokio::sync::Semaphore::new(1)),
            max_state_bytes: 0,
            task_memory: None,
            storage: Default::default(),
            allowed: None,
            secrets: Default::default(),
        }
    }
}

/// A poisoned lock is a bug: panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("executor cache lock poisoned")
}

impl Caches {
    /// Caches whose states may hold up to `max_state_bytes`, for tasks
    /// confined to `allowed`.
    pub fn new(max_state_bytes: u64, stores: Stores, allowed: Option<AllowedPaths>) -> Self {
        Caches {
            max_state_bytes,
            storage: stores,
            allowed,
            ..Default::default()
        }
    }

    /// With tasks' Kafka secrets read as `secrets` allows.
    pub fn with_secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// With states kept in a local store configured by `config`.
    pub fn with_local_state(mut self, config: crate::state::local::LocalConfig) -> Self {
        self.states = States::new(config);
        self
    }

    /// With a memory pool of `bytes` for each task's query operators.
    pub fn with_task_memory(mut self, bytes: u64) -> Self {
        self.task_memory = Some(usize::try_from(bytes).unwrap_or(usize::MAX));
        self
    }

    /// What a map task's query may use: the plan's budget, and this
    /// executor's memory pool per task.
    pub fn task_limits(&self, budget: std::time::Duration) -> sluice_sql::RunLimits {
        sluice_sql::RunLimits {
            budget,
            memory: self.task_memory,
        }
    }

    /// The most state bytes held at once.
    pub fn max_state_bytes(&self) -> u64 {
        if self.max_state_bytes == 0 {
            u64::MAX
        } else {
            self.max_state_bytes
        }
    }

    /// The sink at `path`, opened on first use. Blocking (it may create the
    /// directory): call it from a blocking thread. Failures are not cached.
    pub fn sink(&self, path: &str) -> Result<FileSink, ExecutorError> {
        if let Some(s) = lock(&self.sinks).get(path) {
            return Ok(s.clone());
        }
        let sink = FileSink::open(&self.storage, path)?;
        lock(&self.sinks).insert(path.to_string(), sink.clone());
        Ok(sink)
    }

    /// The shuffle and state files of the query whose checkpoint
    /// directory is `location`, opened on first use. Blocking, like
    /// [`Caches::sink`].
    pub fn state_store(&self, location: &str) -> Result<StateStore, ExecutorError> {
        if let Some(s) = lock(&self.stores).get(location) {
            return Ok(s.clone());
        }
        let store = StateStore::open(&self.storage, location)?;
        lock(&self.stores).insert(location.to_string(), store.clone());
        Ok(store)
    }

    fn table(&self, key: &str) -> Option<Arc<Vec<RecordBatch>>> {
        let mut kept = lock(&self.tables);
        let i = kept.iter().position(|(k, _)| k == key)?;
        let entry = kept.remove(i).expect("found above");
        let rows = entry.1.clone();
        kept.push_back(entry);
        Some(rows)
    }

    fn keep_table(&self, key: String, rows: Arc<Vec<RecordBatch>>) {
        let mut kept = lock(&self.tables);
        kept.retain(|(k, _)| *k != key);
        kept.push_back((key, rows));
        while kept.len() > TABLES_KEPT {
            kept.pop_front();
        }
    }
}

/// The static tables of a task, from the cache or read now.
pub async fn tables(caches: &Caches, plans: &[TablePlan]) -> Result<Vec<Table>, ExecutorError> {
    let mut out = Vec::with_capacity(plans.len());
    for plan in plans {
        let malformed =
            |m: String| ExecutorError::MalformedTask(format!("table {}: {m}", plan.name));
        let schema =
            sluice_sql::decode_schema(&plan.schema).map_err(|e| malformed(e.to_string()))?;
        let key = format!("{plan:?}");
        let batches = match caches.table(&key) {
            Some(rows) => rows,
            None => {
                let files = plan
                    .files
                    .clone()
                    .ok_or_else(|| malformed("no files".into()))?;
                let reader: Box<dyn SourceReader> = Box::new(FilesReader::new(
                    files,
                    schema.clone(),
                    caches.storage.clone(),
                )?);
                let columns = Columns::all(&schema);
                let rows: Vec<RecordBatch> = reader
                    .read(columns, ReadCounters::default())
                    .try_collect()
                    .await?;
                let rows = Arc::new(rows);
                caches.keep_table(key, rows.clone());
                rows
            }
        };
        out.push(Table {
            name: plan.name.clone(),
            schema,
            batches,
        });
    }
    Ok(out)
}
