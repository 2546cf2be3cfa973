//! `sluice verify`: runs the exactly-once checker of `sluice-common` over a
//! file sink, renders its report, and decides the exit code.

use anyhow::Context;
use serde_json::Value;
use sluice_common::storage::{Location, StoreOptions, Stores};
use sluice_common::verify::{Report, verify_sink};

/// 0 when every expected row is in the sink exactly once, else 1.
pub fn exit_code(report: &Report) -> u8 {
    if report.is_exact() { 0 } else { 1 }
}

/// The report as JSON, with `exact`.
pub fn report_json(report: &Report) -> Value {
    let mut v = serde_json::to_value(report).unwrap_or_else(|_| serde_json::json!({}));
    v["exact"] = Value::Bool(report.is_exact());
    v
}

/// The report as `key: value` lines, `missing` and `duplicated` first.
pub fn report_text(r: &Report) -> String {
    format!(
        "missing: {}\nduplicated: {}\nunexpected: {}\nrows: {}\ndistinct: {}\n\
         committed_batches: {}\nfiles: {}\nuncommitted_files: {}\ncontiguous_batches: {}\nexact: {}\n",
        r.missing,
        r.duplicated,
        r.unexpected,
        r.rows,
        r.distinct,
        r.committed_batches,
        r.files,
        r.uncommitted_files,
        r.contiguous_batches,
        r.is_exact(),
    )
}

/// A sink location for the checker: URLs as given, paths made absolute.
pub fn sink_location(path: &str) -> anyhow::Result<String> {
    if path.contains("://") {
        return Ok(path.to_string());
    }
    let abs = std::path::absolute(path).with_context(|| format!("bad sink path {path}"))?;
    Ok(abs.to_string_lossy().into_owned())
}

/// Opens sinks with the object store settings of this process's
/// environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
pub fn stores() -> Stores {
    Stores::new(StoreOptions::from_env())
}

/// Checks a sink; returns the report. A local sink must exist: opening
/// storage would otherwise create it, and an empty sink looks exact.
pub async fn check(path: &str, total_rows: Option<u64>) -> anyhow::Result<Report> {
    check_with(&stores(), path, total_rows).await
}

/// [`check`], opening the sink through `stores`.
pub async fn check_with(
    stores: &Stores,
    path: &str,
    total_rows: Option<u64>,
) -> anyhow::Result<Report> {
    let location = sink_location(path)?;
    match Location::parse(&location).map_err(anyhow::Error::msg)? {
        Location::Local(dir) => anyhow::ensure!(
            dir.is_dir(),
            "no sink at {location}: the directory does not exist"
        ),
        Location::Object { .. } => stores.open(&location)?.probe().await?,
    }
    verify_sink(stores, &location, total_rows)
        .await
        .with_context(|| format!("cannot verify the sink at {location}"))
}

/// The `verify` command.
pub async fn command(path: &str, total_rows: Option<u64>, json: bool) -> anyhow::Result<u8> {
    let report = check(path, total_rows).await?;
    if json {
        println!("{}", report_json(&report));
    } else {
        print!("{}", report_text(&report));
    }
    Ok(exit_code(&report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_common::rate::generate;
    use sluice_common::sink::{FileSink, encode_jsonl};

    /// Writes batch `batch` with one part file per value range.
    async fn write_batch(sink: &FileSink, batch: u64, ranges: &[(u64, u64)]) {
        let mut files = Vec::new();
        for (p, &(start, end)) in ranges.iter().enumerate() {
            let rows = generate(0, 1, 1000, 0, start, end).unwrap();
            let data = encode_jsonl(&rows).unwrap();
            let p = u32::try_from(p).unwrap();
            files.push(sink.write_part(batch, p, end - start, data).await.unwrap());
        }
        sink.write_manifest(&FileSink::manifest(batch, 1, files))
            .await
            .unwrap();
    }

    async fn sink_with(batches: &[&[(u64, u64)]]) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::create_dir_all(&path).unwrap();
        let path = path.to_str().unwrap().to_string();
        let sink = FileSink::open(&stores(), &path).unwrap();
        for (b, ranges) in batches.iter().enumerate() {
            write_batch(&sink, b as u64, ranges).await;
        }
        (dir, path)
    }

    #[tokio::test]
    async fn a_correct_sink_is_exact() {
        let (_dir, path) = sink_with(&[&[(0, 5), (5, 10)], &[(10, 20)]]).await;
        let r = check(&path, Some(20)).await.unwrap();
        assert_eq!((r.missing, r.duplicated, r.rows), (0, 0, 20));
        assert!(r.is_exact());
        assert_eq!(exit_code(&r), 0);
        assert!(report_text(&r).starts_with("missing: 0\nduplicated: 0\n"));
        assert_eq!(report_json(&r)["exact"], true);
    }

    #[tokio::test]
    async fn a_missing_row_fails() {
        let (_dir, path) = sink_with(&[&[(0, 5), (5, 10)], &[(10, 19)]]).await;
        let r = check(&path, Some(20)).await.unwrap();
        assert_eq!((r.missing, r.duplicated), (1, 0));
        assert_eq!(exit_code(&r), 1);
        assert!(report_text(&r).starts_with("missing: 1\n"));
        assert_eq!(report_json(&r)["missing"], 1);
    }

    #[tokio::test]
    async fn a_duplicated_row_fails() {
        let (_dir, path) = sink_with(&[&[(0, 5), (5, 10)], &[(10, 20), (19, 20)]]).await;
        let r = check(&path, Some(20)).await.unwrap();
        assert_eq!((r.missing, r.duplicated), (0, 1));
        assert_eq!(exit_code(&r), 1);
        assert!(report_text(&r).contains("duplicated: 1\n"));
        assert_eq!(report_json(&r)["exact"], false);
    }

    #[tokio::test]
    async fn a_missing_sink_is_an_error_and_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nothing-here");
        let err = check(path.to_str().unwrap(), None).await.unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!path.exists());
    }
}
