//! The exactly-once checker. It reads a file sink the way a user would:
//! every manifest under `_sluice/`, then every part file a manifest lists,
//! and counts each `value`. A sink is exact when every expected value is
//! there exactly once and nothing else is.

use std::collections::{BTreeSet, HashMap};

use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sink::FileSink;

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

#[derive(Deserialize)]
struct Row {
    value: u64,
}

/// Checks the sink at `location`. With `total_rows`, the expected values are
/// `0..total_rows`; without, `0..=max seen`.
pub async fn verify_sink(location: &str, total_rows: Option<u64>) -> Result<Report> {
    let sink = FileSink::open(location)?;
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
    let mut counts: HashMap<u64, u32> = HashMap::new();
    for m in &manifests {
        for f in &m.files {
            listed.insert(f.path.clone());
            let path = Path::from(f.path.as_str());
            let bytes = storage.get(&path).await?.ok_or_else(|| Error::Corrupt {
                path: storage.describe(&path),
                reason: format!("listed in manifest of batch {} but missing", m.batch_id),
            })?;
            report.files += 1;
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let row: Row = serde_json::from_slice(line).map_err(|e| Error::Corrupt {
                    path: storage.describe(&path),
                    reason: e.to_string(),
                })?;
                report.rows += 1;
                *counts.entry(row.value).or_default() += 1;
            }
        }
    }
    for meta in storage.list_files(&Path::default()).await? {
        let name = meta.location.filename().unwrap_or_default();
        if name.starts_with("part-") && !listed.contains(name) {
            report.uncommitted_files += 1;
        }
    }
    let expected = total_rows.unwrap_or_else(|| counts.keys().max().map_or(0, |m| m + 1));
    report.distinct = counts.len() as u64;
    for (&v, &c) in &counts {
        if v >= expected {
            report.unexpected += u64::from(c);
        } else if c > 1 {
            report.duplicated += u64::from(c - 1);
        }
    }
    let present = counts.keys().filter(|&&v| v < expected).count() as u64;
    report.missing = expected - present;
    Ok(report)
}
