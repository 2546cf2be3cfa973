//! The Nexmark source through a real cluster, and `sluice nexmark
//! generate` beside it:
//!
//! - `generate` writes the same bytes twice, and exactly the rows a query
//!   over the source reads, for the same settings;
//! - Nexmark's q1, q17, q18 and q19 (over bids), q3 and q8 (persons
//!   joined with auctions), as `sluice-bench nexmark` runs them, while the
//!   driver and an executor are SIGKILLed and restarted, equal what
//!   DataFusion computes over `generate`'s Parquet files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow_array::RecordBatch;
use sluice_nexmark_queries::{self as queries, Mode};
use sluice_tests::cli::run_cli;
use sluice_tests::oracle::{committed, concat, expected_with};
use sluice_tests::stateful::{batches, latest, oracle};
use sluice_tests::{Cluster, QueryState, READY_TIMEOUT, test_rng};

/// Generator settings besides the defaults, in both the specs and
/// `generate`: fewer active people, so that joins find more matches.
const SETTINGS: &str = r#"{"active_people": 200}"#;

/// The `nexmark` source of `table`, as a YAML flow mapping.
pub(crate) fn source(table: &str, events_per_second: u64, events: u64, partitions: u32) -> String {
    format!(
        "{{nexmark: {{table: {table}, events_per_second: {events_per_second}, total_events: {events}, partitions: {partitions}, active_people: 200}}}}"
    )
}

/// Runs `sluice nexmark generate` into `out`, 500 rows a file.
pub(crate) async fn generate(out: &Path, table: &str, events: u64, eps: u64, format: &str) {
    let (events, eps) = (events.to_string(), eps.to_string());
    let args = [
        "nexmark",
        "generate",
        "--events",
        &events,
        "--events-per-second",
        &eps,
        "--table",
        table,
        "--format",
        format,
        "--rows-per-file",
        "500",
        "--settings",
        SETTINGS,
        "--out",
        out.to_str().expect("utf-8 path"),
    ];
    run_cli("127.0.0.1:1", &args, out.parent().expect("a parent"))
        .await
        .assert_success();
}

/// The files of `dir`, by name.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("generated files")
        .map(|e| e.expect("an entry").path())
        .collect();
    out.sort();
    out
}

/// Every row of the Parquet files in `dir`.
pub(crate) fn parquet_rows(dir: &Path) -> RecordBatch {
    let mut all = Vec::new();
    for path in files(dir) {
        let file = std::fs::File::open(&path).expect("a generated file");
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .expect("Parquet")
            .build()
            .expect("a reader");
        all.extend(reader.map(|b| b.expect("a row group")));
    }
    concat(&all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_writes_the_rows_the_source_reads() {
    let cluster = Cluster::new("nexmark-generate");
    let driver = cluster.start_driver();
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let events = 40_000;
    // Each table's rows cut into at least 4 batches, however fast the
    // source's events become available (36,800 bids, 800 people, 2,400
    // auctions).
    for (table, partitions, cap) in [("bid", 3, 8000), ("person", 2, 200), ("auction", 4, 600)] {
        let text = format!(
            "name: {table}\nsources:\n  {table}: {}\nsql: SELECT * FROM {table}\nmax_rows_per_batch: {cap}\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\n",
            source(table, 1_000_000, events, partitions),
            cluster.sink_path(table).display()
        );
        client.submit(&text).await.expect("submit");
    }
    for table in ["bid", "person", "auction"] {
        let [a, b] = ["a", "b"].map(|d| cluster.root().join(format!("gen-{table}-{d}")));
        for dir in [&a, &b] {
            generate(dir, table, events, 1_000_000, "jsonl").await;
        }
        let (fa, fb) = (files(&a), files(&b));
        assert!(fa.len() > 1, "{table}: several files");
        for (x, y) in fa.iter().zip(&fb) {
            let same = std::fs::read(x).unwrap() == std::fs::read(y).unwrap();
            assert!(same, "{} and {} differ", x.display(), y.display());
        }
        let mut generated: Vec<String> = fa
            .iter()
            .flat_map(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                text.lines().map(str::to_string).collect::<Vec<_>>()
            })
            .collect();
        generated.sort();
        let status = client
            .wait_state(table, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.last_committed_batch >= 3, "{table}: {status:#?}");
        let read = committed(&cluster.sink_path(table)).await;
        assert_eq!(read.len(), generated.len(), "{table}: row counts differ");
        assert!(
            read == generated,
            "{table}: the source's rows are not generate's"
        );
    }
}

const EVENTS: u64 = 60_000;
const EVENTS_PER_SECOND: u64 = 6_000;

/// The queries of the oracle test, with the keys of an update-mode one
/// (a top-N's: its group and rank).
const CASES: [(&str, &[&str]); 8] = [
    ("q4", &["category"]),
    ("q1", &[]),
    ("q11", &[]),
    ("q17", &["auction", "day"]),
    ("q18", &["bidder", "auction"]),
    ("q19", &["auction", "rank_number"]),
    ("q3", &[]),
    ("q8", &[]),
];

/// The SQL that DataFusion runs as the oracle of query `name`: its own,
/// or for q11's session windows (which DataFusion has not) the sessions
/// as runs of a bidder's bids at most 10 s apart.
fn oracle_sql<'a>(name: &str, sql: &'a str) -> &'a str {
    match name {
        "q11" => {
            "WITH t AS (SELECT bidder, date_time, CASE WHEN date_time - LAG(date_time) \
             OVER (PARTITION BY bidder ORDER BY date_time) <= INTERVAL '10 seconds' THEN 0 ELSE 1 END AS fresh FROM bid), \
             s AS (SELECT bidder, date_time, SUM(fresh) OVER (PARTITION BY bidder ORDER BY date_time \
             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid FROM t) \
             SELECT bidder, count(*) AS bid_count, min(date_time) AS starttime, \
             max(date_time) + INTERVAL '10 seconds' AS endtime FROM s GROUP BY bidder, sid"
        }
        _ => sql,
    }
}

/// The SQL of query `name` as the test runs it: a top-N's order made
/// total, since DataFusion's batch ROW_NUMBER ranks ties in no fixed order
/// (Sluice gives a tie to the row that arrived first).
fn sql_of(name: &str) -> String {
    let sql = queries::find(name)
        .expect("a Nexmark query")
        .plan
        .expect("runs")
        .sql;
    sql.replace(
        "ORDER BY price DESC)",
        "ORDER BY price DESC, date_time, bidder, extra)",
    )
    .replace(
        "ORDER BY date_time DESC)",
        "ORDER BY date_time DESC, price, extra)",
    )
}

fn spec(name: &str, sink: &Path) -> String {
    let q = queries::find(name).expect("a Nexmark query");
    let plan = q.plan.expect("a query Sluice runs");
    let mut text = format!("name: {name}\nsources:\n");
    for t in plan.tables {
        text += &format!("  {t}: {}\n", source(t, EVENTS_PER_SECOND, EVENTS, 3));
    }
    if plan.watermarks {
        text += "watermarks:\n";
        for t in plan.tables {
            text += &format!("  {t}: {{column: date_time, delay_ms: 0}}\n");
        }
    }
    match plan.mode {
        Mode::Update => text += "output_mode: update\n",
        Mode::Append if plan.watermarks => text += "output_mode: append\n",
        Mode::Append => {}
    }
    text + &format!(
        "max_rows_per_batch: 3000\nstate_partitions: 3\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {:?}\n",
        sink.display(),
        sql_of(name)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_equal_the_oracle_through_driver_and_executor_kills() {
    let mut rng = test_rng();
    let cluster = Cluster::new("nexmark-oracle");
    let driver = cluster.start_driver();
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let victim = cluster.start_executor(&drivers);
    let _survivor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    for (name, _) in CASES {
        let text = spec(name, &cluster.sink_path(name));
        client
            .submit(&text)
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}\n{text}"));
    }
    // The events arrive over 10 s: a SIGKILL of the driver, then of an
    // executor, each at a moment the seed picks while q1 runs.
    client
        .wait_committed("q1", 1, Duration::from_secs(60))
        .await;
    tokio::time::sleep(rng.millis(0, 1500)).await;
    driver.kill();
    tokio::time::sleep(rng.millis(0, 300)).await;
    driver.restart_ready().await;
    let done = client
        .wait_committed("q1", 0, Duration::from_secs(60))
        .await;
    client
        .wait_committed("q1", done + 1, Duration::from_secs(60))
        .await;
    tokio::time::sleep(rng.millis(0, 1000)).await;
    victim.kill();
    tokio::time::sleep(rng.millis(0, 300)).await;
    victim.restart();

    let mut tables = Vec::new();
    for table in ["bid", "person", "auction"] {
        let dir = cluster.root().join(format!("oracle-{table}"));
        generate(&dir, table, EVENTS, EVENTS_PER_SECOND, "parquet").await;
        tables.push((table, parquet_rows(&dir)));
    }
    for (name, keys) in CASES {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(180))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let sql = &sql_of(name);
        let sink = cluster.sink_path(name);
        if keys.is_empty() {
            let want = expected_with(oracle_sql(name, sql), Vec::new(), &tables).await;
            let got = committed(&sink).await;
            eprintln!("{name}: {} rows", want.len());
            assert!(!want.is_empty(), "{name}: the oracle has rows");
            assert_eq!(got.len(), want.len(), "{name}: row counts differ");
            assert!(got == want, "{name}: the sink differs from the oracle");
        } else {
            let want = oracle(sql, Vec::new(), &tables).await;
            let got = latest(&batches(&sink).await, keys);
            eprintln!("{name}: {} groups", want.len());
            assert!(!want.is_empty(), "{name}: the oracle has rows");
            assert!(
                got == want,
                "{name}: the sink's latest rows differ from the oracle"
            );
        }
    }
    assert_eq!(driver.starts(), 2, "the driver ran twice");
    assert_eq!(victim.starts(), 2, "the executor ran twice");
}

/// Every file under `dir`, recursively.
fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(all_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discard_sink_counts_rows_and_bytes_and_writes_nothing() {
    let cluster = Cluster::new("nexmark-discard");
    let driver = cluster.start_driver();
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let events = 200_000;
    // q2: the auction and price (two bigints) of one bid in about 123.
    let sql = queries::find("q2").unwrap().plan.unwrap().sql;
    let text = format!(
        "name: discard\nsources:\n  bid: {}\nsql: {sql:?}\nmax_rows_per_batch: 40000\ntrigger:\n  interval_ms: 0\nsink:\n  discard: {{}}\n",
        source("bid", 1_000_000, events, 2)
    );
    client.submit(&text).await.expect("submit");
    let status = client
        .wait_state("discard", QueryState::Finished, Duration::from_secs(120))
        .await;
    let progress = client.progress("discard").await.expect("progress");
    assert_eq!(progress.len() as i64, status.last_committed_batch + 1);
    assert!(progress.len() > 3, "several batches: {}", progress.len());
    let rows: u64 = progress.iter().map(|p| p.num_output_rows).sum();
    let bytes: u64 = progress.iter().map(|p| p.sink_bytes).sum();

    let dir = cluster.root().join("oracle-bid");
    generate(&dir, "bid", events, 1_000_000, "parquet").await;
    let want = expected_with(sql, Vec::new(), &[("bid", parquet_rows(&dir))]).await;
    assert!(!want.is_empty(), "the oracle has rows");
    assert_eq!(rows, want.len() as u64, "the rows counted are the query's");
    assert_eq!(bytes, 16 * rows, "two bigints a row, in Arrow memory");
    let written: Vec<PathBuf> = all_files(cluster.root())
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .collect();
    assert!(written.is_empty(), "the discard sink wrote {written:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_top_n_in_append_mode_emits_each_window_once_when_final() {
    let cluster = Cluster::new("nexmark-window-top-n");
    let driver = cluster.start_driver();
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let events = 30_000;
    // The three highest bids of each 2-second window (an order made total).
    let sql = "SELECT starttime, auction, price, rn FROM \
        (SELECT auction, price, date_bin(INTERVAL '2 seconds', date_time) AS starttime, \
        ROW_NUMBER() OVER (PARTITION BY date_bin(INTERVAL '2 seconds', date_time) \
        ORDER BY price DESC, date_time, bidder, extra) AS rn FROM bid) WHERE rn <= 3";
    let text = format!(
        "name: top\nsources:\n  bid: {}\nwatermarks:\n  bid: {{column: date_time, delay_ms: 500}}\noutput_mode: append\nsql: {sql:?}\nmax_rows_per_batch: 2000\nstate_partitions: 2\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\n",
        source("bid", 3_000, events, 2),
        cluster.sink_path("top").display()
    );
    client.submit(&text).await.expect("submit");
    let status = client
        .wait_state("top", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");

    let dir = cluster.root().join("oracle-bid");
    generate(&dir, "bid", events, 3_000, "parquet").await;
    let want = expected_with(sql, Vec::new(), &[("bid", parquet_rows(&dir))]).await;
    // 30,000 events at 3,000 a second: 10 s, five windows of three rows
    // (and the last event's own window).
    assert!(want.len() >= 15, "{want:#?}");
    let by_batch = batches(&cluster.sink_path("top")).await;
    let emitting: Vec<u64> = by_batch
        .iter()
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(id, _)| *id)
        .collect();
    assert!(
        emitting.len() >= 3,
        "windows close in several batches: {emitting:?}"
    );
    let got = committed(&cluster.sink_path("top")).await;
    assert_eq!(got, want, "each window's top 3, once");
}
