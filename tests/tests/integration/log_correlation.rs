//! `--log-format json`: every line is a JSON object with its spans, and a
//! task's lines on the executor can be found from the batch on the driver:
//! both name the query, the batch, the partition, the attempt, the epoch
//! and the same task id.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sluice_tests::{Cluster, DriverOpts, ExecutorOpts, QueryState, READY_TIMEOUT, Spec};

const QUERY: &str = "traced";
const FILTER: &str = "info,sluice_driver=debug,sluice_executor=debug";

fn json_args() -> Vec<String> {
    vec!["--log-format".into(), "json".into()]
}

fn env() -> Vec<(String, String)> {
    vec![("SLUICE_LOG".into(), FILTER.into())]
}

/// Every line of a process log, each a JSON object (the harness's own
/// `-----` banner lines aside).
fn lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// The fields of the span named `name` that `line` is in.
fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["spans"].as_array()?.iter().find(|s| s["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_executor_lines_are_found_from_its_batch_on_the_driver() {
    let cluster = Cluster::new("log-correlation");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: json_args(),
        env: env(),
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            extra_args: json_args(),
            env: env(),
            ..ExecutorOpts::default()
        },
    );
    let mut client = cluster.client(driver.addr());
    let spec = Spec::new(QUERY, &cluster.sink_path(QUERY))
        .partitions(2)
        .rows_per_second(1000)
        .total_rows(600)
        .interval_ms(100);
    client.submit(&spec.to_yaml()).await.expect("submit");
    let status = client
        .wait_state(QUERY, QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(status.last_committed_batch >= 1, "{status:#?}");

    // The driver: each task attempt it ran, under its query and batch.
    let driver_lines = lines(&driver.log_path());
    let mut from_driver = BTreeSet::new();
    for line in driver_lines.iter().filter(|l| l["message"] == "task done") {
        let query = span(line, "query").unwrap_or_else(|| panic!("in the query span: {line}"));
        let batch = span(line, "batch").unwrap_or_else(|| panic!("in the batch span: {line}"));
        let task = span(line, "task").unwrap_or_else(|| panic!("in the task span: {line}"));
        assert_eq!(query["query"], QUERY, "{line}");
        from_driver.insert((
            task["task"].as_str().unwrap().to_string(),
            query["epoch"].as_u64().unwrap(),
            batch["batch"].as_u64().unwrap(),
            task["partition"].as_u64().unwrap(),
            task["attempt"].as_u64().unwrap(),
        ));
    }
    let batches: BTreeSet<u64> = from_driver.iter().map(|t| t.2).collect();
    assert_eq!(
        batches,
        (0..=status.last_committed_batch as u64).collect(),
        "a task line for every committed batch"
    );

    // The executor: the same tasks, found by the same fields.
    let mut from_executor = BTreeSet::new();
    for line in lines(&executor.log_path())
        .iter()
        .filter(|l| l["message"] == "task done")
    {
        let task = span(line, "task").expect("in the task span");
        assert_eq!(task["query"], QUERY, "{line}");
        from_executor.insert((
            task["task"].as_str().unwrap().to_string(),
            task["epoch"].as_u64().unwrap(),
            task["batch"].as_u64().unwrap(),
            task["partition"].as_u64().unwrap(),
            task["attempt"].as_u64().unwrap(),
        ));
    }
    assert!(!from_driver.is_empty());
    assert_eq!(
        from_driver, from_executor,
        "each task the driver ran is on the executor, with the same fields"
    );
    // Every line is structured: a level, a time and a message or fields.
    assert!(
        driver_lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string()),
        "every driver line has a level and a timestamp"
    );
}
