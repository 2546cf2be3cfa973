//! `/metrics` after a stateful query with a watermark has run: every
//! metric docs/ui-and-metrics.md documents is there with its labels, and the row and
//! batch counters equal what the checkpoint's commits and plans say.

use sluice_common::checkpoint::Log;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use sluice_tests::stateful::rate_spec;
use sluice_tests::{Cluster, QueryState, http, query_dir};

const QUERY: &str = "measured";
const TOTAL: u64 = 20_000;
const SQL: &str = "SELECT window(timestamp_ms, '500 milliseconds') AS w, value % 10 AS k, count(*) AS n FROM input GROUP BY window(timestamp_ms, '500 milliseconds'), value % 10";

/// `name{labels} value` lines, by name and label text.
fn samples(text: &str) -> BTreeMap<String, Vec<(String, f64)>> {
    let mut out: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let value: f64 = value.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
        out.entry(name.to_string())
            .or_default()
            .push((labels.to_string(), value));
    }
    out
}

/// The value of `name` on the series whose labels include each of `want`.
fn value(s: &BTreeMap<String, Vec<(String, f64)>>, name: &str, want: &[&str]) -> f64 {
    let series = s.get(name).unwrap_or_else(|| panic!("{name} is missing"));
    let found: Vec<f64> = series
        .iter()
        .filter(|(labels, _)| want.iter().all(|w| labels.contains(w)))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} with {want:?}: {series:?}");
    found[0]
}

/// Every record in `dir` (a checkpoint log), as JSON.
fn records(dir: &std::path::Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_is_exported_and_the_counters_match_the_checkpoint() {
    let cluster = Cluster::new("metrics");
    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    let spec = rate_spec(
        QUERY,
        &cluster.sink_path(QUERY),
        (20_000, TOTAL),
        SQL,
        &["output_mode: append"],
    );
    client.submit(&spec).await.expect("submit");
    let status = client
        .wait_state(QUERY, QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");

    let (code, response) = http::get(driver.http_addr(), "/metrics", Duration::from_secs(10))
        .await
        .expect("GET /metrics");
    assert_eq!(code, 200);
    let text = String::from_utf8(http::body(&response).to_vec()).unwrap();
    let s = samples(&text);
    let q = format!("query=\"{QUERY}\"");
    let q = q.as_str();

    // Every metric, with its labels.
    for name in [
        "batches_committed_total",
        "input_rows_total",
        "output_rows_total",
        "bad_records_total",
        "rows_dropped_by_watermark_total",
        "sink_bytes_written_total",
        "state_rows",
        "state_bytes",
        "watermark_ms",
        "batch_duration_seconds_count",
    ] {
        value(&s, &format!("sluice_{name}"), &[q]);
    }
    for phase in [
        "latest_offset",
        "wal_commit",
        "execution",
        "sink_commit",
        "commit",
        "map",
        "reduce",
    ] {
        let p = format!("phase=\"{phase}\"");
        value(&s, "sluice_batch_phase_duration_seconds_count", &[q, &p]);
    }
    for stage in ["stage=\"map\"", "stage=\"reduce\""] {
        assert!(value(&s, "sluice_task_attempts_total", &[q, stage]) > 0.0);
        assert_eq!(value(&s, "sluice_task_retries_total", &[q, stage]), 0.0);
        assert!(value(&s, "sluice_task_duration_seconds_count", &[q, stage]) > 0.0);
    }
    assert_eq!(
        value(&s, "sluice_query_state", &[q, "state=\"FINISHED\""]),
        1.0
    );
    assert_eq!(value(&s, "sluice_queries", &["state=\"FINISHED\""]), 1.0);
    assert_eq!(value(&s, "sluice_executors", &[]), 1.0);
    assert_eq!(value(&s, "sluice_slots", &[]), 2.0);
    assert_eq!(value(&s, "sluice_slots_in_use", &[]), 0.0);
    assert_eq!(value(&s, "sluice_executors_lost_total", &[]), 0.0);
    assert_eq!(value(&s, "sluice_leader_elections_won_total", &[]), 1.0);
    assert_eq!(value(&s, "sluice_failovers_total", &[]), 0.0);
    assert_eq!(value(&s, "sluice_is_leader", &[]), 1.0);
    assert_eq!(value(&s, "sluice_leader_lease_age_seconds", &[]), 0.0);
    assert!(value(&s, "sluice_epoch", &[]) >= 1.0);
    assert!(value(&s, "sluice_checkpoint_bytes_written_total", &[]) > 0.0);
    // A clean run: no failures of any kind, and no retries.
    for kind in ["lost", "retryable", "storage", "fatal", "stale_epoch"] {
        let k = format!("kind=\"{kind}\"");
        assert_eq!(value(&s, "sluice_task_failures_total", &[q, &k]), 0.0);
    }

    // The counters against the checkpoint.
    let dir = query_dir(&cluster.checkpoint_root(), QUERY);
    let commits = records(&dir.join(Log::Commits.dir()));
    let plans = records(&dir.join(Log::Offsets.dir()));
    let committed_rows: u64 = commits
        .iter()
        .map(|c| c["num_rows"].as_u64().unwrap())
        .sum();
    let planned_rows: u64 = plans
        .iter()
        .map(|p| {
            let r = &p["source"]["rate"];
            r["end_value"].as_u64().unwrap() - r["start_value"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(planned_rows, TOTAL);
    assert_eq!(
        value(&s, "sluice_batches_committed_total", &[q]),
        commits.len() as f64
    );
    assert_eq!(
        value(&s, "sluice_output_rows_total", &[q]),
        committed_rows as f64
    );
    assert!(committed_rows > 0);
    assert_eq!(value(&s, "sluice_input_rows_total", &[q]), TOTAL as f64);
    assert_eq!(
        value(&s, "sluice_batch_duration_seconds_count", &[q]),
        commits.len() as f64
    );
    let last = commits.last().unwrap();
    assert!(value(&s, "sluice_watermark_ms", &[q]) > 0.0, "{last}");

    // The Grafana dashboard in deploy/ plots only series the driver exports.
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/grafana/sluice-dashboard.json"),
    )
    .expect("deploy/grafana/sluice-dashboard.json");
    let panels: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(panels["panels"].as_array().is_some_and(|p| p.len() >= 10));
    let used = dashboard_series(&dashboard);
    assert!(used.len() >= 20, "{used:?}");
    for name in &used {
        assert!(
            s.contains_key(name),
            "the dashboard plots {name}, which /metrics lacks"
        );
    }
}

/// Every `sluice_*` series name a dashboard's queries name.
fn dashboard_series(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("sluice_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}
