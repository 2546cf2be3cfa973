//! A running query's compaction of its Delta table (see
//! `sluice_common::sink::delta_compact`): in the background after every
//! `compact.every_batches` batches, never on a batch's critical path, one
//! at a time.
//!
//! Invariant: a compaction commits only if no commit since it read the
//! table removed a file it removes (another compaction, another writer's
//! `OPTIMIZE` or delete); otherwise it is abandoned and its new files are
//! deleted. Its commit is create-only, as a batch's is, and carries no
//! `txn`, so it never changes where the query stands.

use std::collections::HashSet;

use sluice_common::Result;
use sluice_common::sink::delta_compact::{self, added_since_compaction, changes_of, plan, rewrite};
use sluice_common::sink::delta_log::{self, Committed, read_commit, versions};
use sluice_common::storage::{Path, Storage};
use sluice_common::time::now_ms;
use tracing::{info, warn};

/// How many versions other writers may take in a row before a
/// compaction gives up until its next turn.
const MAX_RACES: u32 = 16;

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    pub removed: usize,
    pub added: usize,
}

/// Compacts the small files query `app_id` added since its last
/// compaction, after batch `batch`, into files of up to `target` bytes.
pub async fn compact(
    storage: &Storage,
    app_id: &str,
    target: u64,
    batch: u64,
) -> Result<Compacted> {
    let base = versions(storage).await?.last().copied();
    let files = added_since_compaction(storage, app_id).await?;
    let groups = plan(&files, target);
    if groups.is_empty() {
        return Ok(Compacted::default());
    }
    let now = now_ms();
    let mut removed = Vec::new();
    let mut added = Vec::new();
    for group in groups {
        added.push(rewrite(storage, &group, batch, now).await?);
        removed.extend(group);
    }
    let gone: HashSet<&str> = removed.iter().map(|f| f.path.as_str()).collect();
    let bytes = delta_compact::encode(app_id, &removed, &added, now);
    let mut checked = base;
    for _ in 0..MAX_RACES {
        let latest = versions(storage).await?.last().copied();
        if !still_there(storage, checked, latest, &gone).await? {
            abandon(storage, &added, batch).await;
            return Ok(Compacted::default());
        }
        checked = latest;
        let version = latest.map_or(0, |v| v + 1);
        if delta_log::commit(storage, version, bytes.clone()).await? == Committed::Made {
            let done = Compacted {
                removed: removed.len(),
                added: added.len(),
            };
            info!(
                batch,
                version,
                removed = done.removed,
                added = done.added,
                "Delta table compacted"
            );
            return Ok(done);
        }
    }
    warn!(
        batch,
        "other writers took every version the compaction tried; it waits for its next turn"
    );
    abandon(storage, &added, batch).await;
    Ok(Compacted::default())
}

/// Whether no commit after `from` up to `to` removed one of `gone`.
async fn still_there(
    storage: &Storage,
    from: Option<u64>,
    to: Option<u64>,
    gone: &HashSet<&str>,
) -> Result<bool> {
    let Some(to) = to else {
        return Ok(true);
    };
    for version in from.map_or(0, |v| v + 1)..=to {
        let (bytes, what) = read_commit(storage, version).await?;
        let changes = changes_of(&bytes, &what)?;
        if changes.removed.iter().any(|p| gone.contains(p.as_str())) {
            info!(
                version,
                "a commit removed files the compaction removes; it is abandoned"
            );
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes the files of a compaction that will not commit; a failure is
/// logged (the files are in no commit, so no reader sees them).
async fn abandon(storage: &Storage, added: &[sluice_common::sink::delta::AddFile], batch: u64) {
    for f in added {
        if let Err(e) = storage.delete(&Path::from(f.path.as_str())).await {
            warn!(error = %e, batch, file = %f.path, "cannot delete an abandoned compaction's file");
        }
    }
}
