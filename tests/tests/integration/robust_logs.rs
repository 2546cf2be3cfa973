//! At INFO, a driver running a trigger-0 query logs state changes and a
//! summary per query, not a line per batch: hundreds of batches leave a
//! handful of INFO lines, and the per-batch lines appear at DEBUG.

use std::time::Duration;

use sluice_tests::{Cluster, DriverOpts, QueryState, Spec, assert_exactly_once};

const TOTAL: u64 = 12_000;
const PER_BATCH: u64 = 40;

async fn run_query(env: Vec<(String, String)>) -> String {
    let cluster = Cluster::new("logs");
    let driver = cluster.start_driver_with(DriverOpts {
        env,
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let _executor = cluster.start_executor(driver.addr());
    let sink = cluster.sink_path("fast");
    let spec = Spec::new("fast", &sink)
        .rows_per_second(1_000_000)
        .total_rows(TOTAL)
        .interval_ms(0)
        .max_rows_per_batch(PER_BATCH);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_state("fast", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert_exactly_once(&sink, TOTAL).await;
    std::fs::read_to_string(driver.process().log_path()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_batch_lines_are_debug_and_info_gets_a_summary() {
    let batches = TOTAL / PER_BATCH;
    let log = run_query(vec![("SLUICE_LOG".into(), "info".into())]).await;
    let info: Vec<&str> = log.lines().filter(|l| l.contains(" INFO ")).collect();
    assert!(
        !log.contains("batch committed"),
        "per-batch lines at INFO:\n{}",
        info[..info.len().min(10)].join("\n")
    );
    assert!(
        info.len() < 40,
        "{} INFO lines for {batches} batches:\n{}",
        info.len(),
        info.join("\n")
    );
    let summary = info
        .iter()
        .rev()
        .find(|l| l.contains("query progress"))
        .unwrap_or_else(|| panic!("no summary line:\n{}", info.join("\n")));
    assert!(
        summary.contains(&format!("rows_total={TOTAL}")),
        "the last summary counts every row: {summary}"
    );

    let debug = run_query(vec![("SLUICE_LOG".into(), "debug".into())]).await;
    let per_batch = debug
        .lines()
        .filter(|l| l.contains("DEBUG") && l.contains("batch committed"))
        .count();
    assert_eq!(per_batch as u64, batches, "one DEBUG line per batch");
}
