//! The query page's state by operator, in a real browser (Debian's
//! headless Chromium), on a standalone driver and one executor:
//!
//! - a bounded query of two chained aggregations (a histogram of the
//!   counts of `value % 500`) runs to FINISHED; its page lists both
//!   operators, in the order they run, with their state rows and bytes:
//!   the first exactly one row per key (500), every byte count above 0,
//!   and each figure that of the checkpoint's last `progress/N`;
//! - the operators' rows add up to the state rows the page shows;
//! - a stateless query's page shows no operator table.
//!
//! A screenshot goes to `$CARGO_TARGET_TMPDIR/web_ui/query-state.png`.

use sluice_common::checkpoint::Log;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sluice_tests::browser::Browser;
use sluice_tests::spec::Spec;
use sluice_tests::{Cluster, QueryState, query_dir};

const KEYS: u64 = 500;
const ROWS: u64 = 6000;
/// Each key's count, then how many keys have each count.
const HISTOGRAM: &str = "SELECT n, count(*) AS keys FROM \
    (SELECT value % 500 AS k, count(*) AS n FROM input GROUP BY value % 500) GROUP BY n";
const WAIT: Duration = Duration::from_secs(90);

/// The operator table as the page shows it: each row's operator, its
/// cells, and the exact bytes its bytes cell gives on hover.
const OPERATORS: &str = "[...document.querySelectorAll('#q-operators tbody tr')].map(tr => \
    ({ name: tr.dataset.operator, cells: [...tr.children].map(td => td.textContent), \
       exact: tr.querySelector('td.bytes').title }))";

/// "12,345" as shown on the page.
fn number(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|e| panic!("not a number: {text:?}: {e}"))
}

/// "12.3 KiB" as shown on the page: its value and its unit, in bytes.
fn shown_bytes(text: &str) -> (f64, f64) {
    let (value, unit) = text
        .split_once(' ')
        .unwrap_or_else(|| panic!("not a size: {text:?}"));
    let scale = match unit {
        "B" => 1u64,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => panic!("no such unit {other:?} in {text:?}"),
    };
    let value: f64 = value
        .parse()
        .unwrap_or_else(|e| panic!("not a size: {text:?}: {e}"));
    (value, scale as f64)
}

/// `progress/N` of `query`, as JSON.
fn progress(root: &Path, query: &str, batch: u64) -> Value {
    let path = query_dir(root, query)
        .join(Log::Progress.dir())
        .join(format!("{batch:020}"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_page_shows_each_operators_state() {
    let cluster = Cluster::new("web-ui-state");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    // 3 state partitions: each operator's figures are sums over them.
    let histogram = Spec::new("histogram", &cluster.sink_path("histogram"))
        .partitions(2)
        .rows_per_second(4000)
        .total_rows(ROWS)
        .max_rows_per_batch(1000)
        .interval_ms(100)
        .sql(HISTOGRAM)
        .with("output_mode: update")
        .with("state_partitions: 3");
    client
        .submit(&histogram.to_yaml())
        .await
        .expect("submit histogram");
    let plain = Spec::new("plain", &cluster.sink_path("plain"))
        .partitions(1)
        .total_rows(200);
    client.submit(&plain.to_yaml()).await.expect("submit plain");
    for query in ["histogram", "plain"] {
        let status = client.wait_state(query, QueryState::Finished, WAIT).await;
        assert!(status.error.is_empty(), "{status:?}");
    }

    let root = cluster.checkpoint_root();
    let ui = format!("http://{}", driver.http_addr());
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web_ui/query-state.png");
    let browse = tokio::task::spawn_blocking(move || {
        let b = Browser::start();
        b.goto(&format!("{ui}/#/query/histogram"));
        b.wait_for(
            "the operator table",
            "!document.getElementById('q-operators-box').hidden && \
             document.querySelector('#q-operators tbody tr') !== null",
            WAIT,
        );
        let last = number(&b.text("#q-last-batch"));
        let recorded = progress(&root, "histogram", last);
        let recorded = recorded["state_operators"]
            .as_array()
            .unwrap_or_else(|| panic!("batch {last} records no operators: {recorded}"))
            .clone();
        let shown: Vec<Value> = serde_json::from_value(b.eval(OPERATORS)).unwrap();
        b.screenshot(&shot);
        let names: Vec<&str> = shown.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["aggregate", "aggregate-2"], "{shown:?}");
        assert_eq!(shown.len(), recorded.len(), "{shown:?} {recorded:?}");
        let mut rows_shown = 0;
        for (row, rec) in shown.iter().zip(&recorded) {
            let cells: Vec<&str> = row["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            let (rows, bytes) = (number(cells[1]), rec["bytes"].as_u64().unwrap());
            assert_eq!(cells[0], rec["name"].as_str().unwrap(), "{row} {rec}");
            assert_eq!(rows, rec["rows"].as_u64().unwrap(), "{row} {rec}");
            assert!(rows > 0, "{row}");
            let exact = row["exact"].as_str().unwrap();
            assert_eq!(number(exact.trim_end_matches(" bytes")), bytes, "{row}");
            assert!(bytes > 0, "{row} {rec}");
            // To its one decimal.
            let (value, unit) = shown_bytes(cells[2]);
            assert!(
                (value * unit - bytes as f64).abs() <= 0.051 * unit,
                "{cells:?}: recorded {bytes}"
            );
            rows_shown += rows;
        }
        // The first aggregation keeps one group per key.
        assert_eq!(number(shown[0]["cells"][1].as_str().unwrap()), KEYS);
        assert_eq!(number(&b.text("#q-state-rows")), rows_shown);

        // A stateless query has no operators.
        b.run("location.hash = '#/query/plain'");
        b.wait_for(
            "the stateless query's batches",
            "document.getElementById('q-last-batch').textContent !== '–'",
            WAIT,
        );
        assert_eq!(
            b.eval("document.getElementById('q-operators-box').hidden"),
            Value::Bool(true)
        );
    });
    browse.await.expect("the browser checks");
}
