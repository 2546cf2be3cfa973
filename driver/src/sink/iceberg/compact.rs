//! A running query's compaction of its Iceberg table: in the background
//! after every `compact.every_batches` batches, never on a batch's
//! critical path, one at a time.
//!
//! ```text
//!  current snapshot's manifest list
//!    ├─ manifests the query's batches added ─► their small files rewritten into fewer
//!    └─ every other manifest ───────────────► kept as it is
//!  one manifest: new files ADDED, rewritten files DELETED, the others EXISTING
//!  one `replace` snapshot: the kept manifests, then that one ─► the catalog's compare-and-swap
//! ```
//!
//! So each compaction also folds the batches' manifests into one. The
//! compacted files keep nothing of the query's batches: where the query
//! stands is still its newest append in the ancestry.
//!
//! Invariant: a compaction commits only on a table whose current snapshot
//! still lists every manifest it folds; otherwise (another compaction or
//! writer rewrote them) it is abandoned and its new files deleted.

use std::collections::HashSet;

use sluice_common::sink::delta::AddFile;
use sluice_common::sink::delta_compact::{plan, rewrite};
use sluice_common::sink::iceberg::manifest::{
    DataFile, Entry, NewManifest, Status, encode_manifest, manifest_of, read_manifest,
};
use sluice_common::sink::iceberg::metadata::{QUERY_KEY, replace_summary};
use sluice_common::storage::{AllowedPaths, Path, Storage, Stores};
use sluice_common::time::now_ms;
use tracing::{info, warn};

use super::table::{self, create_new, manifests_of, read_at, write_snapshot};
use crate::error::DriverError;
use sluice_common::sink::iceberg::catalog::SqlTable;

/// How many times other writers may move the table in a row before a
/// compaction gives up until its next turn.
const MAX_RACES: u32 = 16;

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    pub removed: usize,
    pub added: usize,
}

/// Where the table is: its storage (the location) and data directory.
pub struct Place<'a> {
    pub stores: &'a Stores,
    pub allowed: &'a AllowedPaths,
    pub catalog: &'a SqlTable,
    pub storage: &'a Storage,
    pub data: &'a Storage,
}

/// Compacts the small files of query `query_id`'s batches, after batch
/// `batch`, into files of up to `target` bytes.
pub async fn compact(
    at: &Place<'_>,
    query_id: &str,
    target: u64,
    batch: u64,
) -> Result<Compacted, DriverError> {
    let Some(mut table) = table::load(at.stores, at.allowed, at.catalog).await? else {
        return Ok(Compacted::default());
    };
    let ours: HashSet<i64> = table
        .meta
        .snapshots
        .iter()
        .filter(|s| s.summary.get(QUERY_KEY).map(String::as_str) == Some(query_id))
        .map(|s| s.snapshot_id)
        .collect();
    let listed = manifests_of(at.stores, table.meta.current()).await?;
    let mut folded = HashSet::new();
    let mut live = Vec::new();
    for e in &listed {
        let Some((path, sequence, by)) = manifest_of(e) else {
            continue;
        };
        if ours.contains(&by) {
            folded.insert(path.to_string());
            let entries = read_manifest(path, &read_at(at.stores, path).await?, sequence)?;
            live.extend(entries.into_iter().filter(|e| e.status != Status::Deleted));
        }
    }
    let prefix = format!("{}/", table.meta.data_dir());
    let files: Vec<AddFile> = live
        .iter()
        .filter_map(|e| {
            Some(AddFile {
                path: e.file.path.strip_prefix(&prefix)?.to_string(),
                partition_values: Vec::new(),
                size: e.file.bytes,
                modification_time_ms: 0,
                num_records: e.file.records,
            })
        })
        .collect();
    let groups = plan(&files, target);
    if groups.is_empty() {
        return Ok(Compacted::default());
    }
    let now = now_ms();
    let mut rewritten = HashSet::new();
    let mut added = Vec::new();
    for group in groups {
        added.push(rewrite(at.data, &group, batch, now).await?);
        rewritten.extend(group.into_iter().map(|f| format!("{prefix}{}", f.path)));
    }
    let snapshot_id = (rand::random::<u64>() >> 1) as i64;
    let mut entries: Vec<Entry> = added
        .iter()
        .map(|f| {
            let file = DataFile {
                path: format!("{prefix}{}", f.path),
                records: f.num_records,
                bytes: f.size,
            };
            Entry::added(snapshot_id, file)
        })
        .collect();
    for mut e in live {
        if rewritten.contains(&e.file.path) {
            e.status = Status::Deleted;
            e.snapshot_id = snapshot_id;
        } else {
            e.status = Status::Existing;
        }
        entries.push(e);
    }
    let bytes = encode_manifest(&table.meta, &entries)?;
    let name = format!("metadata/{}-c0.avro", uuid::Uuid::new_v4());
    let length = bytes.len() as u64;
    create_new(at.storage, &name, bytes).await?;
    let path = format!("{}/{name}", table.meta.location);
    let manifest = NewManifest::of(path, length, snapshot_id, &entries);
    let count = |status: Status| {
        let of = entries.iter().filter(|e| e.status == status);
        let files = of.clone().count() as u64;
        let rows = of.clone().map(|e| e.file.records).sum();
        (files, rows, of.map(|e| e.file.bytes).sum())
    };
    let (plus, minus) = (count(Status::Added), count(Status::Deleted));
    for _ in 0..MAX_RACES {
        let listed = manifests_of(at.stores, table.meta.current()).await?;
        let still: HashSet<&str> = listed
            .iter()
            .filter_map(|e| manifest_of(e).map(|(p, _, _)| p))
            .collect();
        if !folded.iter().all(|p| still.contains(p.as_str())) {
            info!(
                batch,
                "another commit rewrote what the compaction folds; it is abandoned"
            );
            break;
        }
        let kept: Vec<_> = listed
            .iter()
            .filter(|e| manifest_of(e).is_none_or(|(p, _, _)| !folded.contains(p)))
            .cloned()
            .collect();
        let summary = replace_summary(query_id, plus, minus, table.meta.current());
        let next =
            write_snapshot(at.storage, &table, (snapshot_id, kept, &manifest), summary).await?;
        if at
            .catalog
            .swap(table.file.clone(), next.file.clone())
            .await?
        {
            let done = Compacted {
                removed: minus.0 as usize,
                added: plus.0 as usize,
            };
            info!(
                batch,
                removed = done.removed,
                added = done.added,
                "Iceberg table compacted"
            );
            return Ok(done);
        }
        table = table::load_existing(at.stores, at.allowed, at.catalog).await?;
    }
    abandon(at.data, &added, batch).await;
    Ok(Compacted::default())
}

/// Deletes the files of a compaction that will not commit; a failure is
/// logged (the files are in no manifest, so no reader sees them).
async fn abandon(data: &Storage, added: &[AddFile], batch: u64) {
    for f in added {
        if let Err(e) = data.delete(&Path::from(f.path.as_str())).await {
            warn!(error = %e, batch, file = %f.path, "cannot delete an abandoned compaction's file");
        }
    }
}
