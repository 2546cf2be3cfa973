//! Checks for large states, cheap in memory: a sink read row by row, and
//! the resident memory of a process, sampled.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_common::sink::FileSink;
use sluice_common::storage::Stores;

/// The latest `(batch, columns)` of each integer key `key` of a jsonl
/// sink, reading every committed file once, each line as it comes; a
/// batch that emits one key twice, or a listed file that is missing, fails
/// the test.
pub async fn latest_ints(
    sink: &Path,
    key: &str,
    columns: &[&str],
) -> HashMap<i64, (u64, Vec<i64>)> {
    let location = sink.to_str().expect("utf-8 sink path");
    let files = FileSink::open(&Stores::default(), location).expect("sink opens");
    let mut manifests = files.manifests().await.expect("manifests read");
    manifests.sort_by_key(|m| m.batch_id);
    let mut latest: HashMap<i64, (u64, Vec<i64>)> = HashMap::new();
    for m in manifests {
        for f in &m.files {
            let text = std::fs::read_to_string(sink.join(&f.path))
                .unwrap_or_else(|e| panic!("{} is listed but cannot be read: {e}", f.path));
            for line in text.lines().filter(|l| !l.is_empty()) {
                let row: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
                let int = |c: &str| {
                    row.get(c)
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or_else(|| panic!("{line}: no integer {c}"))
                };
                let values = columns.iter().map(|c| int(c)).collect();
                let k = int(key);
                let before = latest.insert(k, (m.batch_id, values));
                assert!(
                    before.is_none_or(|(b, _)| b < m.batch_id),
                    "batch {} emits key {k} twice",
                    m.batch_id
                );
            }
        }
    }
    latest
}

/// The resident memory of process `pid` now, in bytes (`VmRSS`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The highest resident memory seen of whatever process `pid()` names
/// (sampled every 50 ms, across restarts) until the returned peak is
/// dropped.
pub struct PeakRss {
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    pub fn watch(pid: impl Fn() -> Option<u32> + Send + 'static) -> PeakRss {
        let peak = Arc::new(AtomicU64::new(0));
        let seen = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some(rss) = pid().and_then(rss_bytes) {
                    seen.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        PeakRss { peak, task }
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.task.abort();
    }
}
