//! The manifests of a file sink, what their files are named, and the pure
//! decisions about them: which batch writes a compacted manifest and which
//! batches it covers, which files a reader reads, and which a purge
//! deletes. Nothing here touches storage (see [`super::log`]).
//!
//! ```text
//! _sluice/<batch:020>            the manifest of one batch (a delta)       create-only
//! _sluice/<batch:020>.compact    a segment: the manifests of the batches   create-only
//!                                after the previous compacted manifest,
//!                                up to and including batch
//! ```
//!
//! Every `interval` batches the log is compacted: batch N with
//! `(N + 1) % interval == 0` writes `N.compact`, a segment holding the
//! deltas after the previous compacted manifest, up to and including N.
//! Segments never restate earlier ones, so the bytes written grow linearly
//! with the batches, and a batch that compacts reads only its segment's
//! deltas. (Spark's `_spark_metadata` restates the whole log in every
//! compacted file; Sluice did too before segments, and a reader still
//! accepts such files: they are segments that start at the first batch.)
//!
//! A reader reads every segment and the deltas after the latest one; two
//! segments that both list a batch must list it alike. A purge after batch
//! `committed` deletes the deltas older than the retain window that a
//! segment up to `committed` lists; segments are kept.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::checkpoint::{RECORD_VERSION, padded, parse_padded};

/// The directory of the manifests, under the sink root.
pub const MANIFEST_DIR: &str = "_sluice";

/// The suffix of a compacted manifest's name.
pub const COMPACT_SUFFIX: &str = ".compact";

/// Batches between two compacted manifests, unless configured otherwise.
pub const COMPACT_INTERVAL: u64 = 10;

/// One file of a batch, as listed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkFile {
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
}

/// The list of files that batch N made visible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkManifest {
    pub version: u32,
    pub batch_id: u64,
    pub epoch: u64,
    pub files: Vec<SinkFile>,
    /// Claimed for a batch that its stopped query never committed: it
    /// lists no files, and readers skip it (see [`SinkManifest::abandon`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
}

impl SinkManifest {
    /// The manifest of `batch` listing `files` (sorted by path).
    pub fn new(batch: u64, epoch: u64, mut files: Vec<SinkFile>) -> Self {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        SinkManifest {
            version: RECORD_VERSION,
            batch_id: batch,
            epoch,
            files,
            abandoned: false,
        }
    }

    /// The manifest that claims `batch` for good once its query stopped
    /// before committing it: written create-only, it wins against a late
    /// write of the batch's real manifest, or loses to it, and only when
    /// it wins may the batch's part files be removed.
    pub fn abandon(batch: u64, epoch: u64) -> Self {
        SinkManifest {
            abandoned: true,
            ..SinkManifest::new(batch, epoch, Vec::new())
        }
    }
}

/// `_sluice/<batch>.compact`: a segment of the log, the manifests of
/// consecutive committed batches up to and including `batch_id`, each as
/// its delta recorded it, in batch order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactManifest {
    pub version: u32,
    pub batch_id: u64,
    pub manifests: Vec<SinkManifest>,
}

impl CompactManifest {
    /// The segment of `batch`: `deltas`, the last of which is `batch`'s own.
    pub fn build(batch: u64, deltas: Vec<SinkManifest>) -> Result<Self, String> {
        let compact = CompactManifest {
            version: RECORD_VERSION,
            batch_id: batch,
            manifests: deltas,
        };
        compact.check()?;
        Ok(compact)
    }

    /// Checks the shape every compacted manifest has: its entries in
    /// strictly ascending batch order, the last one its own batch.
    pub fn check(&self) -> Result<(), String> {
        if let Some(w) = self
            .manifests
            .windows(2)
            .find(|w| w[0].batch_id >= w[1].batch_id)
        {
            return Err(format!(
                "entries out of order: batch {} before batch {}",
                w[0].batch_id, w[1].batch_id
            ));
        }
        match self.manifests.last() {
            Some(m) if m.batch_id == self.batch_id => Ok(()),
            Some(m) => Err(format!(
                "compacts batch {} but its last entry is batch {}",
                self.batch_id, m.batch_id
            )),
            None => Err(format!("compacts batch {} but has no entry", self.batch_id)),
        }
    }

    /// True when this segment lists batch `batch`.
    pub fn covers(&self, batch: u64) -> bool {
        self.manifests
            .binary_search_by_key(&batch, |m| m.batch_id)
            .is_ok()
    }
}

/// The name of a file under `_sluice/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ManifestName {
    /// `<batch:020>`: one batch's manifest.
    Delta(u64),
    /// `<batch:020>.compact`: a segment of the log ending at `batch`.
    Compact(u64),
}

impl ManifestName {
    /// The name `name` stands for, or `None` when it is neither form.
    pub fn parse(name: &str) -> Option<Self> {
        match name.strip_suffix(COMPACT_SUFFIX) {
            Some(b) => parse_padded(b).map(ManifestName::Compact),
            None => parse_padded(name).map(ManifestName::Delta),
        }
    }

    pub fn batch(self) -> u64 {
        match self {
            ManifestName::Delta(b) | ManifestName::Compact(b) => b,
        }
    }

    /// The file name under `_sluice/`.
    pub fn file_name(self) -> String {
        match self {
            ManifestName::Delta(b) => padded(b),
            ManifestName::Compact(b) => format!("{}{COMPACT_SUFFIX}", padded(b)),
        }
    }
}

/// True when batch `batch` writes a compacted manifest; never with an
/// `interval` of 0 (compaction off).
pub fn compacts_at(batch: u64, interval: u64) -> bool {
    interval > 0 && (batch + 1).is_multiple_of(interval)
}

/// The compacted manifest that batch `batch`'s segment follows while the
/// interval stays the same: the one `interval` batches before it, or
/// `None` for the first.
pub fn previous_compact(batch: u64, interval: u64) -> Option<u64> {
    batch
        .checked_sub(interval)
        .filter(|&p| compacts_at(p, interval))
}

/// The first batch of the segment that batch `batch` writes, from the
/// names under `_sluice/` (when [`previous_compact`] is missing: a sink
/// written before compaction, or with another interval): the batch after
/// the latest compacted manifest before `batch`; without one, the first
/// delta listed, or `batch` itself.
pub fn segment_start(names: &[ManifestName], batch: u64) -> u64 {
    let before = |n: &ManifestName, compact: bool| match *n {
        ManifestName::Compact(c) if compact && c < batch => Some(c),
        ManifestName::Delta(d) if !compact && d < batch => Some(d),
        _ => None,
    };
    match names.iter().filter_map(|n| before(n, true)).max() {
        Some(c) => c + 1,
        None => names
            .iter()
            .filter_map(|n| before(n, false))
            .min()
            .unwrap_or(batch),
    }
}

/// What a reader reads of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// Every compacted manifest, ascending.
    pub compacts: Vec<u64>,
    /// The deltas after the latest one (every delta without one), ascending.
    pub deltas: Vec<u64>,
}

/// What to read of the files `names` to see every batch: every segment,
/// and the deltas after the latest.
pub fn read_plan(names: &[ManifestName]) -> ReadPlan {
    let mut compacts: Vec<u64> = names
        .iter()
        .filter_map(|n| match n {
            ManifestName::Compact(c) => Some(*c),
            ManifestName::Delta(_) => None,
        })
        .collect();
    compacts.sort_unstable();
    compacts.dedup();
    let latest = compacts.last().copied();
    let mut deltas: Vec<u64> = names
        .iter()
        .filter_map(|n| match n {
            ManifestName::Delta(d) if latest.is_none_or(|c| *d > c) => Some(*d),
            _ => None,
        })
        .collect();
    deltas.sort_unstable();
    deltas.dedup();
    ReadPlan { compacts, deltas }
}

/// Two segments list one batch differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The segment read second.
    pub compact: u64,
    pub reason: String,
}

/// Every committed batch's manifest, in batch order, from `segments` (a
/// sink written before segments has ones that overlap: each batch they
/// share must be listed alike) and the `deltas` after the latest segment,
/// without the batches a stopped query abandoned.
pub fn merge(
    segments: Vec<CompactManifest>,
    deltas: Vec<SinkManifest>,
) -> Result<Vec<SinkManifest>, Disagreement> {
    let mut by_batch: BTreeMap<u64, (u64, SinkManifest)> = BTreeMap::new();
    for segment in segments {
        for m in segment.manifests {
            match by_batch.entry(m.batch_id) {
                Entry::Vacant(v) => {
                    v.insert((segment.batch_id, m));
                }
                Entry::Occupied(o) if o.get().1 == m => {}
                Entry::Occupied(o) => {
                    return Err(Disagreement {
                        compact: segment.batch_id,
                        reason: format!(
                            "lists batch {} unlike {}",
                            m.batch_id,
                            ManifestName::Compact(o.get().0).file_name()
                        ),
                    });
                }
            }
        }
    }
    let mut out: Vec<SinkManifest> = by_batch.into_values().map(|(_, m)| m).collect();
    out.extend(deltas);
    out.retain(|m| !m.abandoned);
    Ok(out)
}

/// The deltas a purge after batch `committed` may delete, each under the
/// segment that must list it: the deltas older than the last `retain`
/// batches (`committed + 1 - retain` on), each under the first segment up
/// to `committed` that ends at or after it. A delta without one is kept,
/// whatever its age, and so is every name of a batch after `committed`.
pub fn purge_candidates(
    names: &[ManifestName],
    committed: u64,
    retain: u64,
) -> BTreeMap<u64, Vec<u64>> {
    let keep_from = (committed + 1).saturating_sub(retain);
    let compacts: BTreeSet<u64> = names
        .iter()
        .filter_map(|n| match *n {
            ManifestName::Compact(c) if c <= committed => Some(c),
            _ => None,
        })
        .collect();
    let mut out: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for n in names {
        if let ManifestName::Delta(d) = *n
            && d < keep_from
            && d <= committed
            && let Some(&c) = compacts.range(d..).next()
        {
            out.entry(c).or_default().push(d);
        }
    }
    for deltas in out.values_mut() {
        deltas.sort_unstable();
        deltas.dedup();
    }
    out
}

/// The deltas a purge deletes of `candidates` (see [`purge_candidates`]):
/// those that the segment they are filed under, as read back, lists. A
/// segment that was not read back (absent from `segments`) deletes none.
pub fn purge_plan(
    candidates: &BTreeMap<u64, Vec<u64>>,
    segments: &[CompactManifest],
) -> Vec<ManifestName> {
    segments
        .iter()
        .filter_map(|s| candidates.get(&s.batch_id).map(|ds| (s, ds)))
        .flat_map(|(s, ds)| ds.iter().filter(|d| s.covers(**d)))
        .map(|&d| ManifestName::Delta(d))
        .collect()
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
