//! The web UI in a real browser (Debian's headless Chromium): an HA
//! cluster (1 etcd member, 2 drivers, 1 executor) runs a stateful windowed
//! query with a watermark and a stateless query of 1100 tiny batches.
//!
//! - the query page's charts hold points from real batches, and the
//!   figures it shows are those of the checkpoint's `progress/N` and
//!   `offsets/N`;
//! - the page updates without a reload;
//! - the queries and cluster pages show the queries, the leader, its
//!   epoch, the standby and the executor;
//! - the standby's page says it is a standby and links to the leader's UI;
//! - the admin stop button stops the query;
//! - a chart holds the last 1000 batches of the long query;
//! - on a query of 200,000 rows/s (a driver and an executor of its own),
//!   every tick label of every chart's y-axis fits in its axis.
//!
//! Screenshots of every page go to `$CARGO_TARGET_TMPDIR/web_ui/`.

use sluice_common::checkpoint::Log;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use sluice_tests::browser::Browser;
use sluice_tests::ha::Ha;
use sluice_tests::spec::Spec;
use sluice_tests::stateful::WINDOWS;
use sluice_tests::{Cluster, QueryState, query_dir};

const QUERY: &str = "windows";
const MANY: &str = "many";
const MANY_BATCHES: u64 = 1100;
const ENDED: &str = "ended";
const WAIT: Duration = Duration::from_secs(60);

fn shots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("web_ui")
}

/// A checkpoint record of `query`: `log/N` as JSON.
fn record(root: &Path, query: &str, log: Log, batch: u64) -> Value {
    let path = query_dir(root, query).join(log.entry(batch));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// "12,345" as shown on the page.
fn number(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|e| panic!("not a number: {text:?}: {e}"))
}

/// The rows of the rate source that `offsets/N` planned.
fn planned_rows(plan: &Value) -> u64 {
    let rate = &plan["source"]["rate"];
    rate["end_value"].as_u64().unwrap() - rate["start_value"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_shows_live_charts_that_match_the_checkpoint() {
    let cluster = Cluster::new("web-ui");
    let ha = Ha::start(&cluster, 1, 2, 1).await;
    let leader = &ha.drivers[ha.leader];
    let standby = &ha.drivers[1 - ha.leader];
    let mut client = cluster.client(&ha.list);
    let windows = Spec::new(QUERY, &cluster.sink_path(QUERY))
        .partitions(4)
        .rows_per_second(2000)
        .max_rows_per_batch(4000)
        .interval_ms(250)
        .sql(WINDOWS)
        .with("watermark: {column: timestamp_ms, delay_ms: 200}")
        .with("state_partitions: 4")
        .with("output_mode: append");
    client
        .submit(&windows.to_yaml())
        .await
        .expect("submit windows");
    let many = Spec::new(MANY, &cluster.sink_path(MANY))
        .partitions(1)
        .rows_per_second(1_000_000)
        .total_rows(MANY_BATCHES * 10)
        .max_rows_per_batch(10)
        .interval_ms(0);
    client.submit(&many.to_yaml()).await.expect("submit many");
    // A bounded windowed query: its last batch ends the input, with the
    // watermark at the end of time.
    let ended = Spec::new(ENDED, &cluster.sink_path(ENDED))
        .partitions(2)
        .rows_per_second(1_000_000)
        .total_rows(4000)
        .max_rows_per_batch(1000)
        .interval_ms(0)
        .sql(WINDOWS)
        .with("watermark: {column: timestamp_ms, delay_ms: 200}")
        .with("output_mode: append");
    client.submit(&ended.to_yaml()).await.expect("submit ended");
    // The cluster as the API reports it, once the executor has attached.
    let deadline = std::time::Instant::now() + WAIT;
    let info = loop {
        let info = client.cluster_info().await.expect("cluster info");
        if !info.executors.is_empty() && !info.standbys.is_empty() {
            break info;
        }
        assert!(std::time::Instant::now() < deadline, "{info:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let root = cluster.checkpoint_root();
    let leader_ui = format!("http://{}", leader.http_addr());
    let standby_ui = format!("http://{}", standby.http_addr());
    let dir = shots();
    let browse = tokio::task::spawn_blocking(move || {
        let b = Browser::start();

        // The query page: charts from real batches, figures from the checkpoint.
        b.goto(&format!("{leader_ui}/#/query/{QUERY}"));
        b.run("window.__sameDocument = true");
        b.wait_for("4 batches charted", "sluiceUi.points.rates >= 4", WAIT);
        b.wait_for("the phases chart", "sluiceUi.points.phases >= 4", WAIT);
        b.wait_for(
            "state rows shown",
            "sluiceUi.records.some(r => r.state_rows_total > 0)",
            WAIT,
        );
        let shown: Vec<Value> = b
            .eval("[...document.querySelectorAll('#q-progress tbody tr')].map(tr => ({ batch: tr.dataset.batch, cells: [...tr.children].map(td => td.textContent) }))")
            .as_array()
            .cloned()
            .unwrap();
        assert!(shown.len() >= 4, "{shown:?}");
        for row in &shown {
            let batch: u64 = row["batch"].as_str().unwrap().parse().unwrap();
            let cells: Vec<&str> = row["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            let progress = record(&root, QUERY, Log::Progress, batch);
            let plan = record(&root, QUERY, Log::Offsets, batch);
            assert_eq!(
                number(cells[3]),
                progress["num_input_rows"].as_u64().unwrap(),
                "batch {batch}: {cells:?}"
            );
            assert_eq!(
                number(cells[3]),
                planned_rows(&plan),
                "batch {batch}: {cells:?}"
            );
            assert_eq!(
                number(cells[1]),
                progress["epoch"].as_u64().unwrap(),
                "batch {batch}"
            );
            assert_eq!(
                number(cells[7]),
                progress["state_rows_total"].as_u64().unwrap(),
                "batch {batch}"
            );
            assert_eq!(
                cells[6],
                format!("{} ms", progress["duration_ms"]["total"]),
                "batch {batch}"
            );
        }
        let newest: u64 = shown[0]["batch"].as_str().unwrap().parse().unwrap();
        let charted = b.eval("sluiceUi.records.map(r => r.batch_id)");
        let charted: Vec<u64> = serde_json::from_value(charted).unwrap();
        assert_eq!(
            charted,
            (0..charted.len() as u64).collect::<Vec<_>>(),
            "every batch from 0 on"
        );
        assert!(
            b.text("#q-sql").contains("window(timestamp_ms"),
            "{}",
            b.text("#q-sql")
        );
        assert!(
            b.text("#q-spec").contains("name: windows"),
            "{}",
            b.text("#q-spec")
        );
        assert_eq!(
            b.eval("document.getElementById('chart-watermark').hidden"),
            Value::Bool(false)
        );
        assert_eq!(b.text("#q-state"), "RUNNING");

        // Live: newer batches arrive in the same document.
        let later = format!(
            "Number(document.getElementById('q-last-batch').textContent) >= {}",
            newest + 3
        );
        b.wait_for("the page shows newer batches", &later, WAIT);
        assert_eq!(b.eval("window.__sameDocument === true && performance.getEntriesByType('navigation').length === 1"), Value::Bool(true), "no reload");
        assert!(b.eval("sluiceUi.points.rates").as_u64().unwrap() >= 7);
        b.wait_for(
            "the stop button (admin)",
            "!document.getElementById('stop').hidden",
            WAIT,
        );
        b.screenshot(&dir.join("query.png"));

        // The queries page.
        b.run("location.hash = '#/'");
        b.wait_for(
            "the queries table",
            &format!("document.querySelector('tr[data-query=\"{MANY}\"]') !== null"),
            WAIT,
        );
        let state = b.text(&format!("tr[data-query=\"{QUERY}\"] td.state"));
        assert_eq!(state, "RUNNING");
        let last = number(&b.text(&format!("tr[data-query=\"{QUERY}\"] td.last-batch")));
        assert!(last >= newest + 3, "{last}");
        b.screenshot(&dir.join("queries.png"));

        // The cluster page.
        b.run("location.hash = '#/cluster'");
        b.wait_for(
            "the executors table",
            "document.querySelector('tr[data-executor]') !== null",
            WAIT,
        );
        assert_eq!(b.text("#c-leader"), info.leader);
        assert_eq!(number(&b.text("#c-epoch")), info.epoch);
        assert_eq!(b.text("#c-standbys"), info.standbys.join(""));
        assert_eq!(info.standbys.len(), 1, "{info:?}");
        let e = &info.executors[0];
        assert_eq!(
            b.text(&format!("tr[data-executor=\"{}\"] td.slots", e.id)),
            e.slots.to_string()
        );
        assert!(
            b.text(&format!("tr[data-executor=\"{}\"] td.heartbeat", e.id))
                .ends_with('s')
        );
        b.screenshot(&dir.join("cluster.png"));

        // A finished bounded query: its last batch ended the input.
        b.run(&format!("location.hash = '#/query/{ENDED}'"));
        b.wait_for(
            "the bounded query finished",
            "document.getElementById('q-state').textContent === 'FINISHED'",
            WAIT,
        );
        assert_eq!(b.text("#q-watermark"), "end of input");
        let last_row = b.eval("[...document.querySelector('#q-progress tbody tr').children].map(td => td.textContent)");
        assert_eq!(last_row[8], "end of input", "{last_row}");

        // The long query: a chart keeps its last 1000 batches.
        b.run(&format!("location.hash = '#/query/{MANY}'"));
        b.wait_for(
            "the long query finished",
            "document.getElementById('q-state').textContent === 'FINISHED'",
            Duration::from_secs(240),
        );
        b.wait_for(
            "1000 points",
            "sluiceUi.points.rates === 1000 && sluiceUi.points.phases === 1000",
            WAIT,
        );
        let first = b.eval("sluiceUi.records[0].batch_id").as_u64().unwrap();
        assert_eq!(first, MANY_BATCHES - 1000, "the last 1000 batches");
        println!(
            "1000-batch charts drawn in {} ms",
            b.eval("sluiceUi.renderMs")
        );
        assert!(
            b.eval("document.getElementById('stop').hidden")
                .as_bool()
                .unwrap(),
            "no stop button on a finished query"
        );
        b.screenshot(&dir.join("query-1000.png"));

        // The stop button.
        b.run(&format!("location.hash = '#/query/{QUERY}'"));
        b.wait_for(
            "the stop button",
            "!document.getElementById('stop').hidden",
            WAIT,
        );
        b.run("window.confirm = () => true; document.getElementById('stop').click()");
        b.wait_for(
            "stopped",
            "document.getElementById('q-state').textContent === 'STOPPED'",
            WAIT,
        );

        // The standby's page links to the leader.
        let b2 = Browser::start();
        b2.goto(&format!("{standby_ui}/"));
        b2.wait_for(
            "the standby banner",
            "!document.getElementById('standby-banner').hidden",
            WAIT,
        );
        let href = b2.wait_for(
            "the leader link",
            "document.getElementById('leader-link')?.getAttribute('href')",
            WAIT,
        );
        assert_eq!(href, Value::String(format!("{leader_ui}/")));
        assert_eq!(b2.text("#role-badge"), "standby");
        b2.screenshot(&dir.join("standby.png"));
    });
    browse.await.expect("the browser checks");
    let status = client.get(QUERY).await.expect("status");
    assert_eq!(status.state, QueryState::Stopped as i32, "{status:?}");
    println!("screenshots in {}", shots().display());
}

/// The y-axis tick labels of the query page's shown charts that do not fit
/// in their axis (half a pixel of rounding aside), and each chart's largest
/// y tick. uPlot draws a label on its canvas beside its tick, away from the
/// plot: what lies outside the axis, past the canvas edge or over a
/// neighbour, is cut.
const AXIS_LABELS: &str = r#"(() => {
  const ctx = document.createElement("canvas").getContext("2d");
  const clipped = [], top = {};
  for (const [chart, u] of Object.entries(sluiceUi.plots)) {
    if (u.root.parentNode.hidden) continue;
    for (const a of u.axes.filter((a) => a.show && a.side % 2 === 1)) {
      top[chart] = Math.max(...a._splits);
      const left = a.side === 3;
      const start = Math.max(0, left ? a._pos - a._size : a._pos);
      const end = Math.min(u.width, left ? a._pos : a._pos + a._size);
      const inset = (a.ticks.show ? a.ticks.size : 0) + a.gap;
      ctx.font = a.font[0];
      for (const v of a._values.filter((v) => v != null)) {
        const w = ctx.measureText(String(v)).width / uPlot.pxRatio;
        const [l, r] = left ? [a._pos - inset - w, a._pos - inset]
                            : [a._pos + inset, a._pos + inset + w];
        if (l < start - 0.5 || r > end + 0.5) {
          clipped.push(`${chart}: "${v}" is drawn at x ${l.toFixed(1)}..${r.toFixed(1)} px, ` +
            `its axis spans ${start.toFixed(1)}..${end.toFixed(1)} px`);
        }
      }
    }
  }
  return { clipped, top };
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_labels_of_large_rates_fit_their_axes() {
    let cluster = Cluster::new("web-ui-axes");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let fast = Spec::new("fast", &cluster.sink_path("fast"))
        .partitions(4)
        .rows_per_second(200_000)
        .interval_ms(500)
        .sql(WINDOWS)
        .with("watermark: {column: timestamp_ms, delay_ms: 200}")
        .with("state_partitions: 2")
        .with("output_mode: append");
    let mut client = cluster.client(&drivers);
    client.submit(&fast.to_yaml()).await.expect("submit fast");
    let ui = format!("http://{}", driver.http_addr());
    let shot = shots().join("query-fast.png");
    let browse = tokio::task::spawn_blocking(move || {
        let b = Browser::start();
        b.goto(&format!("{ui}/#/query/fast"));
        b.wait_for(
            "3 batches charted, one over 100,000 rows/s",
            "sluiceUi.points.rates >= 3 && sluiceUi.records.some(r => r.input_rows_per_second > 100000)",
            WAIT,
        );
        let labels = b.eval(AXIS_LABELS);
        b.screenshot(&shot);
        let top = &labels["top"];
        for chart in ["rates", "phases", "state", "watermark"] {
            assert!(
                top[chart].is_number(),
                "the {chart} chart is shown: {labels}"
            );
        }
        assert!(top["rates"].as_f64().unwrap() >= 100_000.0, "{labels}");
        let clipped: Vec<String> = serde_json::from_value(labels["clipped"].clone()).unwrap();
        assert!(
            clipped.is_empty(),
            "clipped tick labels (see {}):\n{}",
            shot.display(),
            clipped.join("\n")
        );
    });
    browse.await.expect("the browser checks");
}
