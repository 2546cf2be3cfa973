//! The manifest log of a file sink on storage (`_sluice/`, see
//! [`super::manifest`]): writing a batch's delta, writing a segment (a
//! compacted manifest), reading every batch's manifest, and purging what
//! readers no longer need.
//!
//! A batch that compacts reads only its segment's deltas, by name, and
//! lists `_sluice/` only when the previous segment is not where the
//! interval puts it. Reading lists it once, and again when a delta it
//! listed is gone (a purge deleted it once a segment listed it). A purge
//! lists it too; it runs in the background.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tracing::{debug, info};

use super::manifest::{
    CompactManifest, MANIFEST_DIR, ManifestName, SinkManifest, compacts_at, merge,
    previous_compact, purge_candidates, purge_plan, read_plan, segment_start,
};
use crate::checkpoint::{decode, encode};
use crate::error::{Error, Result};
use crate::storage::{Created, Path, Storage};

/// Listings a reader makes before it gives up on files that vanish.
const READ_ATTEMPTS: usize = 5;

/// Deltas read at once.
const PARALLEL_READS: usize = 16;

fn path(name: ManifestName) -> Path {
    Path::from_iter([MANIFEST_DIR, &name.file_name()])
}

/// Removes batch `batch`'s manifest when it is an abandoned one (see
/// [`SinkManifest::abandon`]): the batch may commit again. Returns the
/// manifest that stays, a real one, or `None`.
pub async fn reopen(storage: &Storage, batch: u64) -> Result<Option<SinkManifest>> {
    match read_delta(storage, batch).await? {
        Some(m) if m.abandoned => {
            storage.delete(&path(ManifestName::Delta(batch))).await?;
            Ok(None)
        }
        other => Ok(other),
    }
}

/// Writes the manifest of a batch, or adopts the one already there.
pub async fn write_delta(storage: &Storage, manifest: &SinkManifest) -> Result<SinkManifest> {
    let path = path(ManifestName::Delta(manifest.batch_id));
    match storage.create(&path, encode(manifest)?).await? {
        Created::New => Ok(manifest.clone()),
        Created::Existing(b) => decode_delta(&b, &storage.describe(&path), manifest.batch_id),
    }
}

/// After `last`, the stored manifest of its batch N: when N compacts (see
/// [`compacts_at`]), writes `N.compact`, create-only: the segment of the
/// deltas after the previous compacted manifest, up to N. A segment
/// already there with the same entries is adopted (a replay of N builds
/// the same one, from the same files); with other entries it is a
/// [`Error::Conflict`]. Returns whether N compacts.
pub async fn write_compact(storage: &Storage, last: &SinkManifest, interval: u64) -> Result<bool> {
    let batch = last.batch_id;
    if !compacts_at(batch, interval) {
        return Ok(false);
    }
    let from = match previous_compact(batch, interval) {
        Some(p) if storage.exists(&path(ManifestName::Compact(p))).await? => p + 1,
        _ => {
            let from = segment_start(&list(storage).await?, batch);
            info!(
                batch,
                from,
                "the previous segment is not where the interval puts it; starting after the latest one listed"
            );
            from
        }
    };
    let mut deltas = read_deltas(storage, from..batch).await?;
    deltas.push(last.clone());
    let compact = CompactManifest::build(batch, deltas)
        .map_err(|reason| corrupt(storage, ManifestName::Compact(batch), reason))?;
    create_compact(storage, &compact).await?;
    Ok(true)
}

async fn create_compact(storage: &Storage, compact: &CompactManifest) -> Result<()> {
    let name = ManifestName::Compact(compact.batch_id);
    let path = path(name);
    let bytes = serde_json::to_vec(compact).map_err(|e| Error::Encoding(e.to_string()))?;
    match storage.create(&path, Bytes::from(bytes)).await? {
        Created::New => {
            debug!(
                batch = compact.batch_id,
                batches = compact.manifests.len(),
                "sink manifests compacted into a segment"
            );
            Ok(())
        }
        Created::Existing(b) => {
            let found: CompactManifest = decode(&b, &storage.describe(&path))?;
            if found == *compact {
                debug!(
                    batch = compact.batch_id,
                    "compacted sink manifest already written; adopting"
                );
                Ok(())
            } else {
                Err(Error::Conflict {
                    path: storage.describe(&path),
                })
            }
        }
    }
}

/// The deltas of `batches` by name, each of which must exist.
async fn read_deltas(
    storage: &Storage,
    batches: std::ops::Range<u64>,
) -> Result<Vec<SinkManifest>> {
    futures::stream::iter(batches)
        .map(|b| async move {
            read_delta(storage, b).await?.ok_or_else(|| {
                corrupt(
                    storage,
                    ManifestName::Delta(b),
                    "missing, but the batch is committed".into(),
                )
            })
        })
        .buffered(PARALLEL_READS)
        .try_collect()
        .await
}

/// The delta manifest of committed batch `batch`, checked, or `None` when
/// it does not exist.
pub async fn read_delta(storage: &Storage, batch: u64) -> Result<Option<SinkManifest>> {
    let name = ManifestName::Delta(batch);
    let Some(b) = storage.get(&path(name)).await? else {
        return Ok(None);
    };
    decode_delta(&b, &storage.describe(&path(name)), batch).map(Some)
}

/// The compacted manifest of `batch`, checked, or `None` when it does not
/// exist.
async fn read_compact(storage: &Storage, batch: u64) -> Result<Option<CompactManifest>> {
    let name = ManifestName::Compact(batch);
    let Some(b) = storage.get(&path(name)).await? else {
        return Ok(None);
    };
    decode_compact(&b, &storage.describe(&path(name)), batch).map(Some)
}

/// Decodes `bytes`, read from `path`, the delta of `batch`.
pub fn decode_delta(bytes: &[u8], path: &str, batch: u64) -> Result<SinkManifest> {
    let m: SinkManifest = decode(bytes, path)?;
    if m.batch_id != batch {
        return Err(corrupt_at(path, format!("records batch {}", m.batch_id)));
    }
    Ok(m)
}

/// Decodes and checks `bytes`, read from `path`, the compacted manifest of
/// `batch` (see [`CompactManifest::check`]).
pub fn decode_compact(bytes: &[u8], path: &str, batch: u64) -> Result<CompactManifest> {
    let c: CompactManifest = decode(bytes, path)?;
    if c.batch_id != batch {
        return Err(corrupt_at(path, format!("records batch {}", c.batch_id)));
    }
    c.check().map_err(|reason| corrupt_at(path, reason))?;
    Ok(c)
}

fn corrupt_at(path: &str, reason: String) -> Error {
    Error::Corrupt {
        path: path.to_string(),
        reason,
    }
}

fn corrupt(storage: &Storage, name: ManifestName, reason: String) -> Error {
    corrupt_at(&storage.describe(&path(name)), reason)
}

/// Every file under `_sluice/`, by name. A name that is no manifest's is
/// damage, reported by name.
pub async fn list(storage: &Storage) -> Result<Vec<ManifestName>> {
    let mut out = Vec::new();
    for meta in storage.list_files(&Path::from(MANIFEST_DIR)).await? {
        let file = meta.location.filename().unwrap_or_default();
        let name = ManifestName::parse(file).ok_or_else(|| Error::Corrupt {
            path: storage.describe(&meta.location),
            reason: "not a sink manifest (expected a 20-digit batch id, or one followed by \
                     .compact)"
                .into(),
        })?;
        out.push(name);
    }
    Ok(out)
}

/// Every batch's manifest, in batch order: every segment's entries, then
/// the deltas after the latest. A delta that is listed and then gone was
/// purged once a segment listed it: the reader lists again.
pub async fn read(storage: &Storage) -> Result<Vec<SinkManifest>> {
    let mut gone = None;
    for attempt in 0..READ_ATTEMPTS {
        let names = list(storage).await?;
        match read_listed(storage, &names).await? {
            Listed::Read(manifests) => return Ok(manifests),
            Listed::Gone(name) => {
                debug!(
                    file = %name.file_name(),
                    attempt,
                    "a listed sink manifest is gone; listing again"
                );
                gone = Some(name);
            }
        }
    }
    let name = gone.expect("at least one attempt");
    Err(corrupt(
        storage,
        name,
        format!("listed, then missing, {READ_ATTEMPTS} times in a row"),
    ))
}

/// What a reader found of one listing.
#[derive(Debug, PartialEq, Eq)]
enum Listed {
    /// Every batch's manifest.
    Read(Vec<SinkManifest>),
    /// A file of the listing that is gone.
    Gone(ManifestName),
}

/// What [`read`] reads of one listing, `names`.
async fn read_listed(storage: &Storage, names: &[ManifestName]) -> Result<Listed> {
    let plan = read_plan(names);
    let compacts: Vec<Option<CompactManifest>> =
        futures::stream::iter(plan.compacts.iter().copied())
            .map(|c| read_compact(storage, c))
            .buffered(PARALLEL_READS)
            .try_collect()
            .await?;
    let mut segments = Vec::with_capacity(compacts.len());
    for (c, segment) in plan.compacts.iter().zip(compacts) {
        match segment {
            Some(s) => segments.push(s),
            None => return Ok(Listed::Gone(ManifestName::Compact(*c))),
        }
    }
    let read: Vec<Option<SinkManifest>> = futures::stream::iter(plan.deltas.iter().copied())
        .map(|b| read_delta(storage, b))
        .buffered(PARALLEL_READS)
        .try_collect()
        .await?;
    let mut deltas = Vec::with_capacity(read.len());
    for (b, m) in plan.deltas.iter().zip(read) {
        match m {
            Some(m) => deltas.push(m),
            None => return Ok(Listed::Gone(ManifestName::Delta(*b))),
        }
    }
    merge(segments, deltas)
        .map(Listed::Read)
        .map_err(|d| corrupt(storage, ManifestName::Compact(d.compact), d.reason))
}

/// After batch `committed`: deletes the deltas that readers no longer
/// need, keeping those of the last `retain` batches (see
/// [`purge_candidates`]). A delta goes only once the segment that lists it
/// reads back whole; segments are kept. Returns how many were deleted.
pub async fn purge(storage: &Storage, committed: u64, retain: u64) -> Result<usize> {
    let names = list(storage).await?;
    let candidates = purge_candidates(&names, committed, retain);
    let keys: Vec<u64> = candidates.keys().copied().collect();
    let segments: Vec<CompactManifest> = futures::stream::iter(keys)
        .map(|c| read_compact(storage, c))
        .buffered(PARALLEL_READS)
        .try_filter_map(|s| async move { Ok(s) })
        .try_collect()
        .await?;
    let doomed = purge_plan(&candidates, &segments);
    futures::stream::iter(doomed.iter().copied())
        .map(|n| async move { storage.delete(&path(n)).await })
        .buffer_unordered(PARALLEL_READS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(doomed.len())
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
