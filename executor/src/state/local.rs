//! The executor's local state: each partition's pairs in memory while they
//! fit ([`memory`]), then in one embedded LSM store (fjall) per
//! executor process, one keyspace in it per partition moved there. This
//! module is the only one that names fjall.
//!
//! The memory tier and the files are a cache. They are deleted when the executor starts (and
//! when it exits cleanly); a partition's state is rebuilt from the
//! checkpoint whenever its keyspace is missing or at another version.
//! Nothing here is ever fsynced: a crash loses the cache, never a result.
//!
//! Memory, of `--state-memory-bytes`: the memory tier holds at most half;
//! the store's block cache a quarter, and its memtables (the latest
//! writes, before they are flushed to disk) a quarter, each keyspace's a
//! sixteenth (between 1 and 16 MiB). The rest of the state is on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::Database;
use tracing::{info, warn};

use crate::error::ExecutorError;
use memory::Budget;
pub use space::{Frozen, Space};

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
    budget: Arc<Budget>,
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
            .cache_size(memory / 4)
            .max_write_buffer_size(Some(memory / 4))
            .manual_journal_persist(true)
            .temporary(true)
            .open()
            .map_err(|e| failed(&format!("cannot open {}", path.display()), e))?;
        info!(path = %path.display(), memory_bytes = memory, "local state store opened");
        Ok(LocalStore {
            db,
            memtable_bytes: (memory / 16).clamp(1 << 20, 16 << 20),
            budget: Arc::new(Budget::new(config.memory_bytes / 2)),
            next: AtomicU64::new(0),
            path,
        })
    }

    /// A new, empty space for one partition's state, in memory until it
    /// outgrows the memory tier; its keyspace (if any) is deleted when the
    /// returned [`Space`] is dropped.
    pub fn space(&self) -> Space {
        let name = format!("p{}", self.next.fetch_add(1, Ordering::Relaxed));
        Space::new(
            self.db.clone(),
            name,
            self.memtable_bytes,
            self.budget.clone(),
        )
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

#[path = "local_memory.rs"]
mod memory;

#[path = "local_space.rs"]
mod space;
