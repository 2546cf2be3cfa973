//! The exactly-once checker. It reads a file sink the way a user would:
//! every batch's manifest under `_sluice/` (every segment and the deltas
//! after the latest, see [`FileSink::manifests`]), then every part file a
//! manifest lists, and counts each `value`. A sink is exact when every
//! expected value is there exactly once and nothing else is.

use std::collections::{BTreeSet, HashSet};

use crate::storage::{Path, Stores};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sink::FileSink;

mod values;

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub committed_batches: u64,
    pub files: u64,
    pub rows: u64,
    pub distinct: u64,
    /// Expected values that are not in the sink.
    pub missing: u64,
    /// Extra copies of values that are in the sink more than once.
    pub duplicated: u64,
    /// Values outside `0..total_rows`.
    pub unexpected: u64,
    /// Part files that no manifest lists (left by an uncommitted attempt).
    pub uncommitted_files: u64,
    /// Batch ids are 0..n with no gap.
    pub contiguous_batches: bool,
}

impl Report {
    /// True when every expected value is present exactly once.
    pub fn is_exact(&self) -> bool {
        self.missing == 0 && self.duplicated == 0 && self.unexpected == 0 && self.contiguous_batches
    }
}

/// Checks the sink at `location`. With `total_rows`, the expected values are
/// `0..total_rows`; without, `0..=max seen`.
pub async fn verify_sink(
    stores: &Stores,
    location: &str,
    total_rows: Option<u64>,
) -> Result<Report> {
    let sink = FileSink::open(stores, location)?;
    let storage = sink.storage().clone();
    let manifests = sink.manifests().await?;
    let mut report = Report {
        committed_batches: manifests.len() as u64,
        contiguous_batches: manifests
            .iter()
            .enumerate()
            .all(|(i, m)| m.batch_id == i as u64),
        ..Default::default()
    };
    let mut listed = BTreeSet::new();
    let mut seen = Seen::default();
    // Values outside 0..total_rows (only with a total).
    let mut outside = HashSet::new();
    for m in &manifests {
        for f in &m.files {
            listed.insert(f.path.clone());
            let path = Path::from(f.path.as_str());
            let bytes = storage.get(&path).await?.ok_or_else(|| Error::Corrupt {
                path: storage.describe(&path),
                reason: format!("listed in manifest of batch {} but missing", m.batch_id),
            })?;
            report.files += 1;
            let values = values::values(&f.path, bytes).map_err(|reason| Error::Corrupt {
                path: storage.describe(&path),
                reason,
            })?;
            for value in values {
                report.rows += 1;
                if total_rows.is_some_and(|t| value >= t) {
                    report.unexpected += 1;
                    outside.insert(value);
                } else if !seen.insert(value) {
                    report.duplicated += 1;
                }
            }
        }
    }
    for meta in storage.list_recursive(&Path::default()).await? {
        let name = meta.location.filename().unwrap_or_default();
        if name.starts_with("part-") && !listed.contains(meta.location.as_ref()) {
            report.uncommitted_files += 1;
        }
    }
    let expected = total_rows.unwrap_or_else(|| seen.max.map_or(0, |m| m + 1));
    report.distinct = seen.distinct + outside.len() as u64;
    report.missing = expected - seen.distinct;
    Ok(report)
}

/// The set of values seen: a bitmap for the dense range a sink holds (one
/// bit per value, so 20 M rows take 2.5 MB; at most 512 MiB), a hash set
/// past it.
#[derive(Default)]
struct Seen {
    bits: Vec<u64>,
    sparse: HashSet<u64>,
    distinct: u64,
    max: Option<u64>,
}

impl Seen {
    /// Values from here on are kept in the hash set.
    const DENSE_LIMIT: u64 = 1 << 32;

    /// Records `v`; false when it was seen before.
    fn insert(&mut self, v: u64) -> bool {
        self.max = Some(self.max.map_or(v, |m| m.max(v)));
        let new = if v < Self::DENSE_LIMIT {
            let (word, bit) = ((v / 64) as usize, 1u64 << (v % 64));
            if word >= self.bits.len() {
                self.bits.resize((word + 1).next_power_of_two(), 0);
            }
            let new = self.bits[word] & bit == 0;
            self.bits[word] |= bit;
            new
        } else {
            self.sparse.insert(v)
        };
        self.distinct += u64::from(new);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_counts_each_value_once() {
        let mut s = Seen::default();
        for v in [
            0,
            63,
            64,
            5_000_000,
            0,
            Seen::DENSE_LIMIT + 1,
            Seen::DENSE_LIMIT + 1,
        ] {
            s.insert(v);
        }
        assert_eq!(s.distinct, 5);
        assert_eq!(s.max, Some(Seen::DENSE_LIMIT + 1));
        assert!(!s.insert(64));
        assert!(s.insert(65));
    }
}
