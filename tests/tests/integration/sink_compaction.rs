//! A sink's manifest log grows linearly: after 520 batches at trigger 0,
//! `_sluice/` holds one segment per 10 batches, each listing only its own
//! 10 batches, and the per-batch manifests of the last `retain_batches`
//! (100) batches, and the sink still reads exactly-once through the
//! segments.

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
    let is_delta = |f: &&String| !f.ends_with(".compact");
    let mut files = manifest_files(&sink);
    while files.iter().filter(is_delta).count() as u64 > RETAIN && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        files = manifest_files(&sink);
    }
    let deltas: Vec<&String> = files.iter().filter(is_delta).collect();
    let want: Vec<String> = (BATCHES - RETAIN..BATCHES)
        .map(|b| format!("{b:020}"))
        .collect();
    assert_eq!(deltas, want.iter().collect::<Vec<_>>(), "the retain window");
    let segments: Vec<&String> = files.iter().filter(|f| f.ends_with(".compact")).collect();
    let want: Vec<String> = (0..BATCHES / INTERVAL)
        .map(|k| format!("{:020}.compact", k * INTERVAL + INTERVAL - 1))
        .collect();
    assert_eq!(
        segments,
        want.iter().collect::<Vec<_>>(),
        "one per interval"
    );
    // Each segment lists its own batches only, so the last one is no
    // larger than the first: manifest bytes written grow linearly.
    let listed = |name: &str| -> Vec<u64> {
        let bytes = std::fs::read(sink.join("_sluice").join(name)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["batch_id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(listed(&want[0]), (0..INTERVAL).collect::<Vec<_>>());
    assert_eq!(
        listed(&want[want.len() - 1]),
        (last + 1 - INTERVAL..=last).collect::<Vec<_>>()
    );
    let size = |name: &str| {
        std::fs::metadata(sink.join("_sluice").join(name))
            .unwrap()
            .len()
    };
    let (first, latest) = (size(&want[0]), size(&want[want.len() - 1]));
    assert!(
        latest < first * 2,
        "the last segment is {latest} bytes, the first {first}"
    );

    let report = assert_exactly_once(&sink, BATCHES * PER_BATCH).await;
    assert_eq!(report.committed_batches, BATCHES, "{report:#?}");
}
