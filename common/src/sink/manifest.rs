//! The manifests of a file sink, what their files are named, and the pure
//! decisions about them: which batch writes a compacted manifest, which
//! files a reader reads, and which a purge deletes. Nothing here touches
//! storage (see [`super::log`]).
//!
//! ```text
//! _sluice/<batch:020>            the manifest of one batch (a delta)       create-only
//! _sluice/<batch:020>.compact    the manifests of batches 0..=batch        create-only
//! ```
//!
//! As Spark's `_spark_metadata` log does, every `interval` batches the log
//! is compacted: batch N with `(N + 1) % interval == 0` writes `N.compact`,
//! the entries of the previous compacted manifest (`N - interval`) and the
//! deltas after it, up to and including N. A reader reads the latest
//! compacted manifest and the deltas after it. A purge after batch
//! `committed` deletes the compacted manifests older than the latest one up
//! to `committed`, and the deltas that one lists which are older than the
//! retain window.

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
        }
    }
}

/// `_sluice/<batch>.compact`: the manifest of every committed batch up to
/// and including `batch_id`, each as its delta recorded it, in batch order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactManifest {
    pub version: u32,
    pub batch_id: u64,
    pub manifests: Vec<SinkManifest>,
}

impl CompactManifest {
    /// The compacted manifest of `batch`: the entries of the previous one,
    /// then `deltas`, the last of which is `batch`'s own.
    pub fn build(
        batch: u64,
        mut previous: Vec<SinkManifest>,
        deltas: Vec<SinkManifest>,
    ) -> Result<Self, String> {
        previous.extend(deltas);
        let compact = CompactManifest {
            version: RECORD_VERSION,
            batch_id: batch,
            manifests: previous,
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

    /// True when this compacted manifest lists batch `batch`.
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
    /// `<batch:020>.compact`: the manifests of batches up to `batch`.
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

/// The compacted manifest that batch `batch`'s builds on: the one
/// `interval` batches before it, or `None` for the first.
pub fn previous_compact(batch: u64, interval: u64) -> Option<u64> {
    batch
        .checked_sub(interval)
        .filter(|&p| compacts_at(p, interval))
}

/// What a reader reads of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// The latest compacted manifest, if there is one.
    pub compact: Option<u64>,
    /// The deltas after it (every delta without one), ascending.
    pub deltas: Vec<u64>,
}

/// What to read of the files `names` to see every batch below `before`
/// (every batch when `None`): the latest compacted manifest, and the deltas
/// that it does not cover.
pub fn read_plan(names: &[ManifestName], before: Option<u64>) -> ReadPlan {
    let below = |b: u64| before.is_none_or(|x| b < x);
    let compact = names
        .iter()
        .filter_map(|n| match n {
            ManifestName::Compact(c) if below(*c) => Some(*c),
            _ => None,
        })
        .max();
    let mut deltas: Vec<u64> = names
        .iter()
        .filter_map(|n| match n {
            ManifestName::Delta(d) if below(*d) && compact.is_none_or(|c| *d > c) => Some(*d),
            _ => None,
        })
        .collect();
    deltas.sort_unstable();
    deltas.dedup();
    ReadPlan { compact, deltas }
}

/// The latest compacted manifest among `names` of a batch up to
/// `committed`: the one a purge after `committed` relies on.
pub fn latest_compact(names: &[ManifestName], committed: u64) -> Option<u64> {
    names
        .iter()
        .filter_map(|n| match n {
            ManifestName::Compact(c) if *c <= committed => Some(*c),
            _ => None,
        })
        .max()
}

/// The files a purge after batch `committed` deletes, given `compact`, the
/// latest compacted manifest up to `committed` (see [`latest_compact`]):
///
/// - every older compacted manifest;
/// - every delta that `compact` lists, except those of the last `retain`
///   batches (`committed + 1 - retain` on).
///
/// A delta that `compact` does not list is kept, whatever its age, and so
/// is every name of a batch after `committed`.
pub fn purge_plan(
    names: &[ManifestName],
    compact: &CompactManifest,
    committed: u64,
    retain: u64,
) -> Vec<ManifestName> {
    let keep_from = (committed + 1).saturating_sub(retain);
    let mut out: Vec<ManifestName> = names
        .iter()
        .copied()
        .filter(|n| match *n {
            ManifestName::Compact(c) => c < compact.batch_id,
            ManifestName::Delta(d) => d < keep_from && d <= committed && compact.covers(d),
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(batch: u64) -> SinkManifest {
        SinkManifest::new(batch, 1, Vec::new())
    }

    fn compact(upto: u64) -> CompactManifest {
        CompactManifest::build(upto, Vec::new(), (0..=upto).map(m).collect()).unwrap()
    }

    /// Every delta of batches `0..=last` and the compacted manifests of
    /// every batch that compacts up to `last`.
    fn names(last: u64, interval: u64) -> Vec<ManifestName> {
        let mut out: Vec<ManifestName> = (0..=last).map(ManifestName::Delta).collect();
        out.extend(
            (0..=last)
                .filter(|&b| compacts_at(b, interval))
                .map(ManifestName::Compact),
        );
        out
    }

    #[test]
    fn every_interval_th_batch_compacts_on_the_previous_compact() {
        let at: Vec<u64> = (0..35).filter(|&b| compacts_at(b, 10)).collect();
        assert_eq!(at, [9, 19, 29]);
        assert_eq!(previous_compact(9, 10), None);
        assert_eq!(previous_compact(19, 10), Some(9));
        assert_eq!(previous_compact(29, 10), Some(19));
        assert!((0..5).all(|b| compacts_at(b, 1)));
        assert_eq!(previous_compact(4, 1), Some(3));
        assert!(!(0..100).any(|b| compacts_at(b, 0)), "0 turns it off");
    }

    #[test]
    fn names_round_trip_and_strangers_are_refused() {
        for n in [ManifestName::Delta(7), ManifestName::Compact(19)] {
            assert_eq!(ManifestName::parse(&n.file_name()), Some(n));
        }
        assert_eq!(
            ManifestName::Compact(19).file_name(),
            "00000000000000000019.compact"
        );
        for bad in ["7", "7.compact", "0000000000000000001x", "x.compact", ""] {
            assert_eq!(ManifestName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_reader_reads_the_latest_compact_and_the_deltas_after_it() {
        let all = names(24, 10);
        let plan = read_plan(&all, None);
        assert_eq!(plan.compact, Some(19));
        assert_eq!(plan.deltas, [20, 21, 22, 23, 24]);
        // Without a compacted manifest: every delta, as before compaction.
        let plain: Vec<ManifestName> = (0..4).rev().map(ManifestName::Delta).collect();
        assert_eq!(
            read_plan(&plain, None),
            ReadPlan {
                compact: None,
                deltas: vec![0, 1, 2, 3]
            }
        );
        // Bounded: what a batch that compacts reads when its previous
        // compacted manifest is missing.
        let plan = read_plan(&all, Some(19));
        assert_eq!(plan.compact, Some(9));
        assert_eq!(plan.deltas, (10..19).collect::<Vec<_>>());
        assert_eq!(read_plan(&[], None), ReadPlan::default());
    }

    #[test]
    fn a_purge_keeps_the_latest_compact_its_later_deltas_and_the_retain_window() {
        let all = names(499, 10);
        assert_eq!(latest_compact(&all, 499), Some(499));
        assert_eq!(latest_compact(&all, 498), Some(489));
        let purged = purge_plan(&all, &compact(499), 499, 100);
        let left: Vec<ManifestName> = all.into_iter().filter(|n| !purged.contains(n)).collect();
        let mut want: Vec<ManifestName> = (400..500).map(ManifestName::Delta).collect();
        want.push(ManifestName::Compact(499));
        assert_eq!(left, want);
        assert!(left.len() as u64 <= 100 + 10);
    }

    #[test]
    fn a_purge_never_deletes_what_the_compact_does_not_cover() {
        // The compact up to 19, with deltas up to 27 and a retain of 1:
        // deltas after 19 stay, and so do the ones the compact lacks.
        let mut all = names(27, 10);
        all.push(ManifestName::Compact(29));
        let mut c = compact(19);
        c.manifests.retain(|m| m.batch_id != 5);
        let purged = purge_plan(&all, &c, 27, 1);
        let mut want: Vec<ManifestName> = (0..=19)
            .filter(|&d| d != 5)
            .map(ManifestName::Delta)
            .collect();
        want.push(ManifestName::Compact(9));
        want.sort();
        assert_eq!(purged, want);
        // A retain window longer than the log deletes only old compacts.
        assert_eq!(
            purge_plan(&names(29, 10), &compact(29), 29, 100),
            [ManifestName::Compact(9), ManifestName::Compact(19)]
        );
    }

    #[test]
    fn a_compact_is_the_previous_entries_then_the_deltas_in_order() {
        let prev = compact(9).manifests;
        let c = CompactManifest::build(19, prev.clone(), (10..=19).map(m).collect()).unwrap();
        assert_eq!(c.manifests.len(), 20);
        assert!(c.covers(0) && c.covers(19) && !c.covers(20));
        let err = CompactManifest::build(19, prev.clone(), vec![m(12), m(11), m(19)]);
        assert!(err.unwrap_err().contains("out of order"));
        let err = CompactManifest::build(19, prev, vec![m(10)]);
        assert!(err.unwrap_err().contains("last entry is batch 10"));
    }
}
