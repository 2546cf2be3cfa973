//! Batches and tasks are bounded, and so is an executor's memory:
//! - a spec with no `max_rows_per_batch` at 10^12 rows/s plans batches of at
//!   most `--max-rows-per-task` rows per partition (recorded in offsets/N);
//! - an executor writes a task's rows in chunks, so its resident memory
//!   stays under the bound docs/concepts.md states however large the task (here
//!   two tasks of 3 M rows each, about 170 MB of JSON lines apiece), and the
//!   output is exactly-once.

use sluice_common::checkpoint::Log;
use std::time::{Duration, Instant};

use sluice_tests::{
    Cluster, DriverOpts, ExecutorOpts, QueryState, Spec, assert_exactly_once, log_entries,
};

/// The bound of docs/concepts.md on an executor's resident memory: 64 MiB, plus
/// 32 MiB per slot.
const RSS_BOUND_KIB: u64 = (64 + 2 * 32) * 1024;
const PER_TASK: u64 = 3_000_000;
const TOTAL: u64 = 2 * PER_TASK;

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_tasks_run_in_bounded_executor_memory() {
    let cluster = Cluster::new("memory");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--max-rows-per-task".into(), PER_TASK.to_string()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            slots: 2,
            ..ExecutorOpts::default()
        },
    );
    let sink = cluster.sink_path("big");
    // No max_rows_per_batch: everything is available at once, and only the
    // driver's task cap bounds the batch.
    let spec = Spec::new("big", &sink)
        .partitions(2)
        .rows_per_second(1_000_000_000_000)
        .total_rows(TOTAL);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");

    let pid = executor.process().pid().expect("the executor runs");
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut peak = 0;
    loop {
        peak = peak.max(rss_kib(pid).unwrap_or(0));
        let s = client.get("big").await.expect("get");
        if s.state != QueryState::Running as i32 {
            assert_eq!(s.state, QueryState::Finished as i32, "{s:#?}");
            break;
        }
        assert!(Instant::now() < deadline, "not finished: {s:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("executor peak RSS {peak} KiB (bound {RSS_BOUND_KIB} KiB)");
    assert!(peak > 0, "RSS was never sampled");
    assert!(
        peak < RSS_BOUND_KIB,
        "executor peak RSS {peak} KiB over the bound {RSS_BOUND_KIB} KiB"
    );

    // Every plan respects the cap, and records it.
    let root = cluster.checkpoint_root();
    for (n, path) in log_entries(&root, "big", Log::Offsets) {
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let rows = record["source"]["rate"]["end_value"].as_u64().unwrap()
            - record["source"]["rate"]["start_value"].as_u64().unwrap();
        assert!(rows <= 2 * PER_TASK, "batch {n}: {rows} rows");
        assert_eq!(record["max_rows_per_task"], PER_TASK, "batch {n}");
    }
    assert_exactly_once(&sink, TOTAL).await;
}
