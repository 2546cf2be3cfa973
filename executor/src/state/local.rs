//! The executor's local state files: one embedded LSM store (fjall) per
//! executor process, one keyspace in it per state partition held. This
//! module is the only one that names fjall.
//!
//! The files are a cache. They are deleted when the executor starts (and
//! when it exits cleanly); a partition's state is rebuilt from the
//! checkpoint whenever its keyspace is missing or at another version.
//! Nothing here is ever fsynced: a crash loses the cache, never a result.
//!
//! Memory: the store's block cache holds half of `--state-memory-bytes`,
//! and the memtables (the latest writes, before they are flushed to disk)
//! a quarter of it, each keyspace's a sixteenth (between 1 and 16 MiB).
//! The rest of the state is on disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, Readable};
use tracing::{info, warn};

use crate::error::ExecutorError;

/// Bytes read from the store.
pub type Stored = fjall::Slice;

/// A (key, value) pair of a state partition.
pub type Pair = (Stored, Stored);

fn failed(what: &str, e: fjall::Error) -> ExecutorError {
    ExecutorError::LocalState(format!("{what}: {e}"))
}

/// Where the local state files go and how much memory they may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// A directory of the executor's own (`--state-dir`); `None`: a new
    /// directory under the system's temporary directory.
    pub dir: Option<PathBuf>,
    /// The most bytes of state kept in memory (`--state-memory-bytes`).
    pub memory_bytes: u64,
}

/// `--state-memory-bytes` unless set: 512 MiB.
pub const DEFAULT_STATE_MEMORY_BYTES: u64 = 512 << 20;

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            dir: None,
            memory_bytes: DEFAULT_STATE_MEMORY_BYTES,
        }
    }
}

/// The executor's local store.
pub struct LocalStore {
    db: Database,
    memtable_bytes: u64,
    next: AtomicU64,
    path: PathBuf,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("path", &self.path)
            .finish()
    }
}

impl LocalStore {
    /// Opens an empty store: whatever `config.dir` held is deleted first.
    /// Blocking.
    pub fn open(config: &LocalConfig) -> Result<Self, ExecutorError> {
        let path = match &config.dir {
            Some(dir) => dir.join("state"),
            None => {
                static OPENED: AtomicU64 = AtomicU64::new(0);
                let base = std::env::temp_dir().join("sluice-state");
                remove_stale(&base);
                let n = OPENED.fetch_add(1, Ordering::Relaxed);
                base.join(format!("{}-{n}", std::process::id()))
            }
        };
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| {
                ExecutorError::LocalState(format!("cannot clear {}: {e}", path.display()))
            })?;
        }
        let memory = config.memory_bytes.max(8 << 20);
        // The bound on all memtables together is not yet a settled part of
        // fjall's API; it is what keeps many partitions' memtables within
        // the memory given.
        #[allow(deprecated)]
        let db = Database::builder(&path)
            .cache_size(memory / 2)
            .max_write_buffer_size(Some(memory / 4))
            .manual_journal_persist(true)
            .temporary(true)
            .open()
            .map_err(|e| failed(&format!("cannot open {}", path.display()), e))?;
        info!(path = %path.display(), memory_bytes = memory, "local state store opened");
        Ok(LocalStore {
            db,
            memtable_bytes: (memory / 16).clamp(1 << 20, 16 << 20),
            next: AtomicU64::new(0),
            path,
        })
    }

    /// A new, empty keyspace for one partition's state; deleted when the
    /// returned [`Space`] is dropped.
    pub fn space(&self) -> Result<Space, ExecutorError> {
        let name = format!("p{}", self.next.fetch_add(1, Ordering::Relaxed));
        let memtable = self.memtable_bytes;
        let ks = self
            .db
            .keyspace(&name, || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .manual_journal_persist(true)
            })
            .map_err(|e| failed("cannot create a state keyspace", e))?;
        Ok(Space {
            db: self.db.clone(),
            ks,
        })
    }
}

/// Deletes the state directories under `base` left by executors that are
/// no longer running (named by their process id, then a count).
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.split('-').next()?.parse::<u32>().ok());
        let Some(pid) = pid else {
            continue;
        };
        let running = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !running && let Err(e) = std::fs::remove_dir_all(entry.path()) {
            warn!(path = %entry.path().display(), error = %e, "stale state directory not removed");
        }
    }
}

/// One partition's keyspace: sorted keys, each with one value.
pub struct Space {
    db: Database,
    ks: Keyspace,
}

impl Drop for Space {
    fn drop(&mut self) {
        if let Err(e) = self.db.delete_keyspace(self.ks.clone()) {
            warn!(error = %e, "local state keyspace not deleted");
        }
    }
}

/// A point-in-time view of a [`Space`], readable while the space moves on.
pub struct Frozen {
    snapshot: fjall::Snapshot,
    ks: Keyspace,
}

impl Frozen {
    /// Every pair, in key order.
    pub fn pairs(&self) -> impl Iterator<Item = Result<Pair, ExecutorError>> + '_ {
        self.snapshot
            .iter(&self.ks)
            .map(|g| g.into_inner().map_err(|e| failed("state scan", e)))
    }
}

impl Space {
    pub fn get(&self, key: &[u8]) -> Result<Option<Stored>, ExecutorError> {
        self.ks.get(key).map_err(|e| failed("state lookup", e))
    }

    pub fn contains(&self, key: &[u8]) -> Result<bool, ExecutorError> {
        self.ks
            .contains_key(key)
            .map_err(|e| failed("state lookup", e))
    }

    /// Writes puts (`Some`) and deletes (`None`) at once.
    pub fn write<'a>(
        &self,
        changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<(), ExecutorError> {
        let mut batch = self.db.batch().durability(None);
        for (key, value) in changes {
            match value {
                Some(v) => batch.insert(&self.ks, key, v),
                None => batch.remove(&self.ks, key),
            }
        }
        batch.commit().map_err(|e| failed("state write", e))
    }

    /// Fills the (empty) space with the pairs `fill` writes, whose keys
    /// must ascend strictly: written as sorted tables directly, the
    /// fastest load there is. When `fill` fails, nothing is loaded.
    pub fn ingest(
        &self,
        fill: impl FnOnce(
            &mut dyn FnMut(&[u8], &[u8]) -> Result<(), ExecutorError>,
        ) -> Result<(), ExecutorError>,
    ) -> Result<(), ExecutorError> {
        let mut ingestion = self
            .ks
            .start_ingestion()
            .map_err(|e| failed("state load", e))?;
        let mut write =
            |k: &[u8], v: &[u8]| ingestion.write(k, v).map_err(|e| failed("state load", e));
        fill(&mut write)?;
        ingestion.finish().map_err(|e| failed("state load", e))
    }

    /// Every pair, in key order.
    pub fn pairs(&self) -> impl Iterator<Item = Result<Pair, ExecutorError>> + '_ {
        self.ks
            .iter()
            .map(|g| g.into_inner().map_err(|e| failed("state scan", e)))
    }

    /// The space as it is now, to read while it changes.
    pub fn freeze(&self) -> Frozen {
        Frozen {
            snapshot: self.db.snapshot(),
            ks: self.ks.clone(),
        }
    }
}
