//! The sink checks of the stateful scenarios, over the rows a jsonl sink
//! committed (every manifest, then every file it lists):
//!
//! - [`check_latest`], for update mode: the last row of each key, by
//!   batch, holds the key's exact totals;
//! - [`Windows::check`], for append mode: each (window, key) once, with its
//!   exact count from the rate source's formula, none before the watermark
//!   passed the window's end, and every pair of the windows it passed.

use std::collections::{BTreeSet, HashSet};

use anyhow::Context;
use serde_json::{Value, json};
use sluice_common::sink::FileSink;

use sluice_cli::verify;

/// How many values below `x` have the remainder `k` by `keys`.
pub fn count_below(x: u64, keys: u64, k: u64) -> u64 {
    x / keys + u64::from(x % keys > k)
}

/// What [`scan_sink`] read.
struct Scan {
    batches: u64,
    files: u64,
    rows: u64,
    /// Batch ids are 0..n with no gap.
    contiguous: bool,
}

/// Reads every row a jsonl sink committed, in batch order, the files as
/// its manifests list them, and hands each row to `visit` with its batch.
async fn scan_sink(out: &str, mut visit: impl FnMut(u64, &Value)) -> anyhow::Result<Scan> {
    let sink = FileSink::open(&verify::stores(), &verify::sink_location(out)?)?;
    let mut manifests = sink.manifests().await?;
    manifests.sort_by_key(|m| m.batch_id);
    let mut scan = Scan {
        batches: manifests.len() as u64,
        files: 0,
        rows: 0,
        contiguous: manifests
            .iter()
            .enumerate()
            .all(|(i, m)| m.batch_id == i as u64),
    };
    for m in &manifests {
        for f in &m.files {
            let path = sluice_common::storage::Path::from(f.path.as_str());
            let bytes = sink.storage().get(&path).await?.with_context(|| {
                format!("{} is listed by batch {} but missing", f.path, m.batch_id)
            })?;
            scan.files += 1;
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let row: Value = serde_json::from_slice(line)
                    .with_context(|| format!("a line of {} is not JSON", f.path))?;
                scan.rows += 1;
                visit(m.batch_id, &row);
            }
        }
    }
    Ok(scan)
}

/// Checks a sink of running totals: of the rows of each key `k` (column
/// `k`, in `0..keys`), the last by batch holds `expected(k)` in `columns`.
/// A key twice in one batch, outside `0..keys` or never emitted fails it.
pub async fn check_latest(
    out: &str,
    keys: u64,
    columns: &[&str],
    expected: impl Fn(u64) -> Vec<i128>,
) -> anyhow::Result<(Value, bool)> {
    let mut latest: Vec<Option<(u64, Vec<i128>)>> = vec![None; usize::try_from(keys)?];
    let (mut twice, mut unexpected) = (0u64, 0u64);
    let scan = scan_sink(out, |batch, row| {
        let key = row["k"].as_u64().filter(|&k| k < keys);
        let values: Option<Vec<i128>> = columns
            .iter()
            .map(|c| row[*c].as_i64().map(i128::from))
            .collect();
        let (Some(k), Some(values)) = (key, values) else {
            unexpected += 1;
            return;
        };
        let slot = &mut latest[k as usize];
        twice += u64::from(slot.as_ref().is_some_and(|(b, _)| *b == batch));
        *slot = Some((batch, values));
    })
    .await?;
    let missing = latest.iter().filter(|l| l.is_none()).count();
    let wrong = (0..keys)
        .zip(&latest)
        .filter(|(k, l)| l.as_ref().is_some_and(|(_, v)| *v != expected(*k)))
        .count();
    let exact = scan.contiguous && missing == 0 && wrong == 0 && twice == 0 && unexpected == 0;
    let check = json!({
        "committed_batches": scan.batches,
        "files": scan.files,
        "rows": scan.rows,
        "contiguous_batches": scan.contiguous,
        "keys": keys,
        "missing_keys": missing,
        "wrong": wrong,
        "twice_in_a_batch": twice,
        "unexpected": unexpected,
        "exact": exact,
    });
    Ok((check, exact))
}

/// The `windowed` scenario's input: value `v` at `start_ms + v * 1000 /
/// rows_per_second` (see `sluice_common::rate`) with key `v % keys`, in
/// tumbling windows of `size_ms` aligned to the epoch.
pub struct Windows {
    pub start_ms: i64,
    pub rows_per_second: u64,
    pub rows: u64,
    pub keys: u64,
    pub size_ms: i64,
}

impl Windows {
    /// The first value whose event time is at or after `t` (at most `rows`).
    fn first_at(&self, t: i64) -> u64 {
        let since = (i128::from(t) - i128::from(self.start_ms)).max(0);
        let v = (since * i128::from(self.rows_per_second) + 999) / 1000;
        u64::try_from(v).map_or(self.rows, |v| v.min(self.rows))
    }

    /// How many values of key `k` fall in the window that starts at `start`.
    fn count(&self, start: i64, k: u64) -> u64 {
        let (lo, hi) = (self.first_at(start), self.first_at(start + self.size_ms));
        count_below(hi, self.keys, k) - count_below(lo, self.keys, k)
    }

    /// The windows that end at or before `watermark` and hold rows, and
    /// their (window, key) pairs.
    fn closed(&self, watermark: Option<i64>) -> (u64, u64) {
        let Some(watermark) = watermark else {
            return (0, 0);
        };
        let mut start = self.start_ms - self.start_ms.rem_euclid(self.size_ms);
        let (mut windows, mut pairs) = (0, 0);
        while start + self.size_ms <= watermark && self.first_at(start) < self.rows {
            let n = self.first_at(start + self.size_ms) - self.first_at(start);
            windows += u64::from(n > 0);
            pairs += n.min(self.keys);
            start += self.size_ms;
        }
        (windows, pairs)
    }

    /// Checks an append-mode sink of `(w, k, n)` rows against the input,
    /// given the last batch's watermark.
    pub async fn check(&self, out: &str, watermark: Option<i64>) -> anyhow::Result<(Value, bool)> {
        let mut seen = HashSet::new();
        let mut windows = BTreeSet::new();
        let (mut wrong, mut duplicated, mut premature, mut unexpected, mut found) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let scan = scan_sink(out, |_, row| {
            let w = &row["w"];
            let parsed = (millis(&w["start"]), millis(&w["end"]), row["k"].as_u64());
            let (Some(start), Some(end), Some(k)) = parsed else {
                unexpected += 1;
                return;
            };
            if end - start != self.size_ms || start.rem_euclid(self.size_ms) != 0 || k >= self.keys
            {
                unexpected += 1;
                return;
            }
            if !seen.insert((start, k)) {
                duplicated += 1;
                return;
            }
            windows.insert(start);
            let closed = watermark.is_some_and(|wm| end <= wm);
            premature += u64::from(!closed);
            if row["n"].as_u64() != Some(self.count(start, k)) {
                wrong += 1;
            } else if closed {
                found += 1;
            }
        })
        .await?;
        let (expected_windows, expected_pairs) = self.closed(watermark);
        let missing = expected_pairs.saturating_sub(found);
        let exact = scan.contiguous
            && wrong == 0
            && duplicated == 0
            && premature == 0
            && unexpected == 0
            && missing == 0;
        let check = json!({
            "committed_batches": scan.batches,
            "files": scan.files,
            "rows": scan.rows,
            "contiguous_batches": scan.contiguous,
            "windows_emitted": windows.len(),
            "expected_windows": expected_windows,
            "pairs_emitted": seen.len(),
            "expected_pairs": expected_pairs,
            "missing": missing,
            "wrong": wrong,
            "duplicated": duplicated,
            "premature": premature,
            "unexpected": unexpected,
            "exact": exact,
        });
        Ok((check, exact))
    }
}

/// A timestamp the jsonl sink wrote, in milliseconds: an integer (a
/// top-level column), or text such as `2025-01-01T00:00:10.5`, in UTC
/// without a zone (a timestamp inside a struct, such as a window's bounds,
/// which Arrow's formatter writes).
fn millis(v: &Value) -> Option<i64> {
    if let Some(ms) = v.as_i64() {
        return Some(ms);
    }
    let text = v.as_str()?.trim_end_matches('Z');
    let (date, time) = text.split_once(['T', ' '])?;
    let num = |t: &str| t.parse::<i64>().ok();
    let mut d = date.splitn(3, '-').map(num);
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(num);
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    let ms = num(format!("{frac:0<3}").get(..3)?)?;
    Some(((days_from_civil(y, m, day) * 24 + h) * 60 + min) * 60_000 + s * 1000 + ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[path = "state_check_tests.rs"]
mod tests;
