//! The demo query of `sluice local` and the windows it computes: 10-second
//! tumbling windows over the rate source's event time, with a watermark, in
//! append mode, so that each window is emitted once, final, when the
//! watermark passes its end. The windows a committed batch emitted are read
//! back from the file sink's committed files (the batch's manifest
//! `_sluice/<batch>` and the part files it lists), as any reader of the
//! sink reads them.

use anyhow::Context;
use sluice_common::sink::{FileSink, read_delta};
use sluice_common::spec::QuerySpec;
use sluice_common::storage::{Path, Stores};

use crate::queries::RateQuery;

/// The length of a window, in seconds.
pub const WINDOW_SECONDS: u64 = 10;
/// How far the watermark stays behind the latest event time.
pub const WATERMARK_DELAY_MS: u64 = 2000;
/// Each window's row count, the lowest, highest and mean `value` in it.
pub const SQL: &str = "SELECT window(timestamp_ms, '10 seconds') AS w, count(*) AS n, \
    min(value) AS min_value, max(value) AS max_value, avg(value) AS avg_value \
    FROM input GROUP BY window(timestamp_ms, '10 seconds')";
/// State partitions: one per slot of the two local executors.
const STATE_PARTITIONS: u32 = 4;

/// The demo's spec text: `query` (whose `sql` should be [`SQL`]) in append
/// mode with its watermark on `timestamp_ms`.
pub fn spec_text(query: &RateQuery) -> String {
    query.spec_text_with(serde_json::json!({
        "output_mode": "append",
        "watermark": {"column": "timestamp_ms", "delay_ms": WATERMARK_DELAY_MS},
        "state_partitions": STATE_PARTITIONS,
    }))
}

/// True when `spec` runs the demo's SQL. A checkpoint may hold another
/// `demo` (an older one, or one submitted by hand), whose rows are not
/// these windows.
pub fn is_windowed(spec: &QuerySpec) -> bool {
    spec.sql() == SQL
}

/// One window as the demo query emits it.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
    pub rows: u64,
    pub min_value: i64,
    pub max_value: i64,
    pub avg_value: f64,
}

impl Window {
    /// Parses one line of the sink,
    /// `{"w":{"start":..,"end":..},"n":..,"min_value":..,"max_value":..,"avg_value":..}`.
    pub fn parse(line: &str) -> anyhow::Result<Window> {
        let v: serde_json::Value = serde_json::from_str(line).context("not JSON")?;
        let int = |v: &serde_json::Value, field: &str| {
            v.get(field)
                .and_then(serde_json::Value::as_i64)
                .with_context(|| format!("no integer {field}"))
        };
        let w = v.get("w").context("no window w")?;
        Ok(Window {
            start_ms: int(w, "start")?,
            end_ms: int(w, "end")?,
            rows: u64::try_from(int(&v, "n")?).context("a negative n")?,
            min_value: int(&v, "min_value")?,
            max_value: int(&v, "max_value")?,
            avg_value: v
                .get("avg_value")
                .and_then(serde_json::Value::as_f64)
                .context("no number avg_value")?,
        })
    }

    /// `14:03:10-14:03:20 UTC  rows 10000  values 10000..19999  avg 14999.5`.
    pub fn text(&self) -> String {
        format!(
            "{}-{} UTC  rows {}  values {}..{}  avg {}",
            clock(self.start_ms),
            clock(self.end_ms),
            self.rows,
            self.min_value,
            self.max_value,
            self.avg_value,
        )
    }
}

/// The UTC time of day of `ms` since the epoch, `HH:MM:SS`.
pub fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The demo's file sink, read as its committed batches list it.
pub struct Sink {
    files: FileSink,
}

impl Sink {
    pub fn open(stores: &Stores, location: &str) -> anyhow::Result<Sink> {
        let files = FileSink::open(stores, location)
            .with_context(|| format!("cannot open the sink {location}"))?;
        Ok(Sink { files })
    }

    /// The windows that committed batch `batch` emitted, by start; `None`
    /// when its manifest is no longer there (a batch older than the sink
    /// keeps manifests for).
    pub async fn windows(&self, batch: u64) -> anyhow::Result<Option<Vec<Window>>> {
        let storage = self.files.storage();
        let Some(manifest) = read_delta(storage, batch).await? else {
            return Ok(None);
        };
        let mut windows = Vec::new();
        for f in &manifest.files {
            let path = Path::from(f.path.as_str());
            let bytes = storage
                .get(&path)
                .await?
                .with_context(|| format!("{} is committed but missing", storage.describe(&path)))?;
            let text = std::str::from_utf8(&bytes)
                .with_context(|| format!("{} is not UTF-8", storage.describe(&path)))?;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let w = Window::parse(line)
                    .with_context(|| format!("{}: not a window: {line}", f.path))?;
                windows.push(w);
            }
        }
        windows.sort_by_key(|w| w.start_ms);
        Ok(Some(windows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_common::sink::part_name;

    fn demo() -> RateQuery {
        RateQuery {
            name: "demo".into(),
            partitions: 4,
            rows_per_second: 1000,
            total_rows: None,
            trigger_ms: 1000,
            max_rows_per_batch: None,
            sink: "/tmp/sluice-data/out".into(),
            sql: Some(SQL.into()),
            format: "jsonl",
        }
    }

    #[test]
    fn the_demo_is_an_append_mode_windowed_query() {
        let spec = QuerySpec::parse(&spec_text(&demo())).unwrap();
        spec.validate().unwrap();
        assert_eq!(
            spec.output_mode,
            Some(sluice_common::spec::OutputMode::Append)
        );
        let watermark = spec.watermark.as_ref().unwrap();
        assert_eq!(
            (watermark.column.as_str(), watermark.delay_ms),
            ("timestamp_ms", 2000)
        );
        assert!(is_windowed(&spec));
        let mut older = demo();
        older.sql = None;
        let older = QuerySpec::parse(&older.spec_text()).unwrap();
        assert!(!is_windowed(&older));
    }

    #[test]
    fn windows_read_as_people_read_them() {
        let line = r#"{"w":{"start":1700000010000,"end":1700000020000},"n":10000,"min_value":10000,"max_value":19999,"avg_value":14999.5}"#;
        let w = Window::parse(line).unwrap();
        assert_eq!(
            (w.start_ms, w.end_ms, w.rows),
            (1_700_000_010_000, 1_700_000_020_000, 10_000)
        );
        assert_eq!(
            w.text(),
            "22:13:30-22:13:40 UTC  rows 10000  values 10000..19999  avg 14999.5"
        );
        assert_eq!(clock(-1000), "23:59:59");
        let err = Window::parse(r#"{"value":1,"timestamp_ms":2}"#).unwrap_err();
        assert!(err.to_string().contains("no window"), "{err}");
    }

    #[tokio::test]
    async fn the_windows_of_a_batch_are_read_from_its_committed_files() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let stores = Stores::default();
        let files = FileSink::open(&stores, location).unwrap();
        let rows = |starts: &[i64]| {
            starts
                .iter()
                .map(|s| {
                    format!(
                        "{{\"w\":{{\"start\":{s},\"end\":{}}},\"n\":2,\"min_value\":1,\"max_value\":2,\"avg_value\":1.5}}\n",
                        s + 10_000
                    )
                })
                .collect::<String>()
        };
        let a = files
            .write_part(3, 0, 2, rows(&[20_000, 0]).into_bytes())
            .await
            .unwrap();
        let b = files
            .write_part(3, 1, 1, rows(&[10_000]).into_bytes())
            .await
            .unwrap();
        files
            .write_manifest(&FileSink::manifest(3, 1, vec![a, b]))
            .await
            .unwrap();
        files
            .write_manifest(&FileSink::manifest(4, 1, vec![]))
            .await
            .unwrap();
        let sink = Sink::open(&stores, location).unwrap();
        let got = sink.windows(3).await.unwrap().unwrap();
        let starts: Vec<i64> = got.iter().map(|w| w.start_ms).collect();
        assert_eq!(starts, [0, 10_000, 20_000]);
        assert_eq!(sink.windows(4).await.unwrap().unwrap(), []);
        assert_eq!(sink.windows(5).await.unwrap(), None);
        // A committed file that is gone is an error, naming it.
        std::fs::remove_file(dir.path().join(part_name("", 3, 1, 0, "jsonl"))).unwrap();
        let err = sink.windows(3).await.unwrap_err();
        assert!(err.to_string().contains("committed but missing"), "{err}");
    }
}
