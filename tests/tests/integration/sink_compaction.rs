//! A sink's manifest log stays bounded: after 520 batches at trigger 0,
//! `_sluice/` holds the latest compacted manifest and the per-batch
//! manifests of the last `retain_batches` (100) batches, at most
//! retain + compact interval files, and the sink still reads exactly-once
//! through the compacted manifest.

use std::time::{Duration, Instant};

use sluice_tests::{Cluster, QueryState, Spec, assert_exactly_once};

const BATCHES: u64 = 520;
const PER_BATCH: u64 = 4;
const RETAIN: u64 = 100;
const INTERVAL: u64 = sluice_common::sink::COMPACT_INTERVAL;

fn manifest_files(sink: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(sink.join("_sluice"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_log_is_compacted_and_purged() {
    let cluster = Cluster::new("compaction");
    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let sink = cluster.sink_path("compact");
    let spec = Spec::new("compact", &sink)
        .partitions(2)
        .rows_per_second(1_000_000)
        .total_rows(BATCHES * PER_BATCH)
        .interval_ms(0)
        .max_rows_per_batch(PER_BATCH);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    let status = client
        .wait_state("compact", QueryState::Finished, Duration::from_secs(180))
        .await;
    let last = BATCHES - 1;
    assert_eq!(status.last_committed_batch, last as i64, "{status:#?}");

    // The purge after the last batch runs in the background.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut files = manifest_files(&sink);
    let settled = |files: &[String]| {
        files.len() as u64 <= RETAIN + INTERVAL
            && files.iter().filter(|f| f.ends_with(".compact")).count() == 1
    };
    while !settled(&files) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        files = manifest_files(&sink);
    }
    assert!(
        files.len() as u64 <= RETAIN + INTERVAL,
        "{} files under _sluice/: {files:?}",
        files.len()
    );
    let compacts: Vec<&String> = files.iter().filter(|f| f.ends_with(".compact")).collect();
    assert_eq!(compacts, [&format!("{last:020}.compact")], "{files:?}");
    for b in BATCHES - RETAIN..BATCHES {
        assert!(
            files.contains(&format!("{b:020}")),
            "the manifest of batch {b}, in the retain window, is kept: {files:?}"
        );
    }

    let report = assert_exactly_once(&sink, BATCHES * PER_BATCH).await;
    assert_eq!(report.committed_batches, BATCHES, "{report:#?}");
}
