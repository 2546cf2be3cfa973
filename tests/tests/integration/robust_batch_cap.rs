//! Every batch is capped by default (`--max-rows-per-batch`), whatever the
//! source offers: a rate source of 10^12 rows a second plans batches of
//! the cap, not of its backlog; a query's own `max_rows_per_batch` replaces
//! the default. The cap is recorded in `offsets/N`. A batch that a stopped
//! query never commits leaves no part files.

use std::time::{Duration, Instant};

use sluice_tests::{Cluster, DriverOpts, ExecutorOpts, Spec, assert_exactly_once, offset_records};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_capped_by_default_and_by_the_spec() {
    let cluster = Cluster::new("batch-cap");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--max-rows-per-batch".into(), "5000".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let flood = |name: &str| {
        Spec::new(name, &cluster.sink_path(name))
            .partitions(64)
            .rows_per_second(1_000_000_000_000)
    };
    client
        .submit(&flood("default").to_yaml())
        .await
        .expect("submit");
    client
        .submit(&flood("own").max_rows_per_batch(300).to_yaml())
        .await
        .expect("submit");
    for (name, cap) in [("default", 5000u64), ("own", 300)] {
        client
            .wait_committed(name, 2, Duration::from_secs(60))
            .await;
        let records = offset_records(&cluster.checkpoint_root(), name);
        assert!(records.len() >= 3, "{name}: {records:?}");
        for r in &records {
            let rows = r.inputs.end_value() - r.inputs.start_value();
            assert_eq!(rows, cap, "{name}: batch {} plans {rows} rows", r.batch_id);
            assert_eq!(r.max_rows_per_batch, Some(cap), "{name}: {r:?}");
        }
    }
}

/// The names of the part files under `sink`, at any depth.
fn part_files(sink: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![sink.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else if name.starts_with("part-") {
                out.push(name);
            }
        }
    }
    out
}

/// A query stopped while its batch waits on a frozen executor never runs
/// that batch again: the part files the other executor wrote for it are
/// removed, and readers see no batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_querys_uncommitted_batch_leaves_no_part_files() {
    let cluster = Cluster::new("batch-abandon");
    // Two tasks of 500 rows: one for each executor's only slot.
    let driver = cluster.start_driver_with(DriverOpts {
        executor_timeout_ms: 60_000,
        extra_args: vec!["--max-rows-per-task".into(), "500".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let one_slot = || ExecutorOpts {
        slots: 1,
        ..ExecutorOpts::default()
    };
    let _working = cluster.start_executor_with(&drivers, one_slot());
    let frozen = cluster.start_executor_with(&drivers, one_slot());
    let mut client = cluster.client(&drivers);
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.cluster_info().await.map_or(0, |i| i.executors.len()) < 2 {
        assert!(Instant::now() < deadline, "two executors attach");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    frozen.pause();

    let sink = cluster.sink_path("abandon");
    let spec = Spec::new("abandon", &sink)
        .partitions(2)
        .rows_per_second(1_000_000)
        .total_rows(1000);
    client.submit(&spec.to_yaml()).await.expect("submit");
    let deadline = Instant::now() + Duration::from_secs(30);
    while part_files(&sink).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the working executor writes its part"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = client.stop("abandon").await.expect("stop");
    assert_eq!(status.last_committed_batch, -1, "{status:#?}");

    let deadline = Instant::now() + Duration::from_secs(10);
    while !part_files(&sink).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(part_files(&sink), Vec::<String>::new(), "left behind");
    let claim = std::fs::read_to_string(sink.join("_sluice").join(format!("{:020}", 0))).unwrap();
    let claim: serde_json::Value = serde_json::from_str(&claim).unwrap();
    assert_eq!(claim["abandoned"], true, "{claim}");
    assert_eq!(claim["files"], serde_json::json!([]), "{claim}");
    frozen.kill();
    let report = assert_exactly_once(&sink, 0).await;
    assert_eq!(report.committed_batches, 0, "{report:#?}");
}
