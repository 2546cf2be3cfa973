//! The manifest log of a file sink on storage (`_sluice/`, see
//! [`super::manifest`]): writing a batch's delta, writing a compacted
//! manifest, reading every batch's manifest, and purging what readers no
//! longer need.
//!
//! Writing never lists `_sluice/`: a batch that compacts reads the previous
//! compacted manifest and the deltas after it by name. Reading lists it
//! once, and again when a file it listed is gone (a purge deleted it after
//! a newer compacted manifest appeared). A purge lists it too; it runs in
//! the background.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tracing::{debug, info};

use super::manifest::{
    CompactManifest, MANIFEST_DIR, ManifestName, SinkManifest, compacts_at, latest_compact,
    previous_compact, purge_plan, read_plan,
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

/// Writes the manifest of a batch, or adopts the one already there.
pub async fn write_delta(storage: &Storage, manifest: &SinkManifest) -> Result<SinkManifest> {
    let path = path(ManifestName::Delta(manifest.batch_id));
    match storage.create(&path, encode(manifest)?).await? {
        Created::New => Ok(manifest.clone()),
        Created::Existing(b) => decode_delta(&b, &storage.describe(&path), manifest.batch_id),
    }
}

/// After `last`, the stored manifest of its batch N: when N compacts (see
/// [`compacts_at`]), writes `N.compact`, create-only. A compacted manifest
/// already there with the same entries is adopted (a replay of N builds
/// the same one, from the same files); with other entries it is a
/// [`Error::Conflict`]. Returns whether N compacts.
pub async fn write_compact(storage: &Storage, last: &SinkManifest, interval: u64) -> Result<bool> {
    let batch = last.batch_id;
    if !compacts_at(batch, interval) {
        return Ok(false);
    }
    let previous = match previous_compact(batch, interval) {
        None => Vec::new(),
        Some(p) => match read_compact(storage, p).await? {
            Some(c) => c.manifests,
            None => {
                return write_compact_from_listing(storage, last)
                    .await
                    .map(|()| true);
            }
        },
    };
    let from = previous.last().map_or(0, |m| m.batch_id + 1);
    let mut deltas = read_deltas(storage, from..batch).await?;
    deltas.push(last.clone());
    let compact = CompactManifest::build(batch, previous, deltas)
        .map_err(|reason| corrupt(storage, ManifestName::Compact(batch), reason))?;
    create_compact(storage, &compact).await?;
    Ok(true)
}

/// [`write_compact`] when the previous compacted manifest is missing (a
/// sink written before compaction, or with another interval): from every
/// manifest before `last`, read as a reader reads them.
async fn write_compact_from_listing(storage: &Storage, last: &SinkManifest) -> Result<()> {
    let batch = last.batch_id;
    info!(
        batch,
        "no previous compacted sink manifest; compacting every manifest before this batch"
    );
    let earlier = read(storage, Some(batch)).await?;
    let compact = CompactManifest::build(batch, earlier, vec![last.clone()])
        .map_err(|reason| corrupt(storage, ManifestName::Compact(batch), reason))?;
    create_compact(storage, &compact).await
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
                "sink manifests compacted"
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

/// Every batch's manifest below `before` (every one when `None`), in batch
/// order: the latest compacted manifest's entries, then the deltas after
/// it. A file that is listed and then gone was purged once a newer
/// compacted manifest covered it: the reader lists again.
pub async fn read(storage: &Storage, before: Option<u64>) -> Result<Vec<SinkManifest>> {
    let mut gone = None;
    for attempt in 0..READ_ATTEMPTS {
        let names = list(storage).await?;
        match read_listed(storage, &names, before).await? {
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
async fn read_listed(
    storage: &Storage,
    names: &[ManifestName],
    before: Option<u64>,
) -> Result<Listed> {
    let plan = read_plan(names, before);
    let mut out = match plan.compact {
        None => Vec::new(),
        Some(c) => match read_compact(storage, c).await? {
            Some(compact) => compact.manifests,
            None => return Ok(Listed::Gone(ManifestName::Compact(c))),
        },
    };
    let deltas: Vec<Option<SinkManifest>> = futures::stream::iter(plan.deltas.iter().copied())
        .map(|b| read_delta(storage, b))
        .buffered(PARALLEL_READS)
        .try_collect()
        .await?;
    for (b, m) in plan.deltas.iter().zip(deltas) {
        match m {
            Some(m) => out.push(m),
            None => return Ok(Listed::Gone(ManifestName::Delta(*b))),
        }
    }
    Ok(Listed::Read(out))
}

/// After batch `committed`: deletes the manifest files that readers no
/// longer need, keeping the deltas of the last `retain` batches (see
/// [`purge_plan`]). Only a compacted manifest up to `committed` is relied
/// on, and only once it reads back whole. Returns how many were deleted.
pub async fn purge(storage: &Storage, committed: u64, retain: u64) -> Result<usize> {
    let names = list(storage).await?;
    let Some(latest) = latest_compact(&names, committed) else {
        return Ok(0);
    };
    let Some(compact) = read_compact(storage, latest).await? else {
        return Ok(0);
    };
    let doomed = purge_plan(&names, &compact, committed, retain);
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
