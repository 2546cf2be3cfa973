//! Several input streams in one query (`sources:`), through a real
//! cluster: file streams in two formats with files arriving while the
//! queries run, a rate stream beside a file stream, and a stream joined
//! with a static table. Each sink equals DataFusion's answer over all the
//! input at once, and each query finishes once all its inputs are.

use sluice_common::checkpoint::{Log, Record};
use std::path::Path;
use std::time::Duration;

use arrow_array::RecordBatch;
use sluice_tests::inputs::{self, SCHEMA_YAML, rows};
use sluice_tests::oracle::{committed, concat, expected_with, rate_input};
use sluice_tests::{Cluster, QueryState};

const FILES: u64 = 4;
const ROWS: u64 = 200;

/// A file source of `format` in `dir`, two files a batch, `FILES` in all.
fn files(dir: &Path, format: &str) -> String {
    let schema = match format {
        "parquet" => String::new(),
        _ => format!(
            "      schema:\n{}",
            SCHEMA_YAML.replace("      - ", "        - ")
        ),
    };
    format!(
        "    files:\n      path: {}\n      format: {format}\n{schema}      max_files_per_batch: 2\n      total_files: {FILES}\n",
        dir.display()
    )
}

fn spec(name: &str, sources: &[(&str, String)], sink: &Path, sql: &str, extra: &str) -> String {
    let mut text = format!("name: {name}\nsources:\n");
    for (table, source) in sources {
        text.push_str(&format!("  {table}:\n{source}"));
    }
    text.push_str(&format!(
        "trigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {sql:?}\n{extra}",
        sink.display()
    ));
    text
}

fn all(first: u64) -> RecordBatch {
    let batches: Vec<RecordBatch> = (first..first + FILES).map(|n| rows(n, ROWS)).collect();
    concat(&batches)
}

const UNION: &str = "SELECT id, city, 'o' AS src FROM orders \
     UNION ALL SELECT id, city, 'p' AS src FROM payments WHERE id % 2 = 0";
const JOINED: &str = "SELECT o.id, c.country FROM orders o JOIN cities c ON o.city = c.name \
     UNION ALL SELECT p.id, upper(p.city) AS country FROM payments p";
const COUNTS: &str = "SELECT city, count(*) AS n, sum(id) AS s FROM \
     (SELECT city, id FROM orders UNION ALL SELECT city, id FROM payments) GROUP BY city";
const TICKS: &str =
    "SELECT value AS id, 'rate' AS src FROM ticks UNION ALL SELECT id, 'file' AS src FROM orders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_streams_commit_what_datafusion_computes_over_all_their_input() {
    let cluster = Cluster::new("multi-stream");
    let driver = cluster.start_driver();
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    let (orders, payments) = (
        cluster.root().join("orders"),
        cluster.root().join("payments"),
    );
    std::fs::create_dir_all(&orders).unwrap();
    std::fs::create_dir_all(&payments).unwrap();
    // Orders are files 0.., payments files 10..: no id is in both.
    let write = |n: u64| {
        inputs::write(&orders, &format!("o-{n}.jsonl"), "jsonl", &rows(n, ROWS));
        inputs::write(
            &payments,
            &format!("p-{n}.parquet"),
            "parquet",
            &rows(10 + n, ROWS),
        );
    };
    for n in 0..FILES / 2 {
        write(n);
    }
    let cities = cluster.root().join("cities.csv");
    std::fs::write(&cities, inputs::encode("csv", &inputs::cities())).unwrap();
    let two = || {
        vec![
            ("orders", files(&orders, "jsonl")),
            ("payments", files(&payments, "parquet")),
        ]
    };
    let rate =
        "    rate:\n      partitions: 3\n      rows_per_second: 400\n      total_rows: 600\n";
    let queries = [
        ("union", two(), UNION, String::new()),
        (
            "joined",
            two(),
            JOINED,
            inputs::cities_table_yaml(&cities, "csv"),
        ),
        (
            "counts",
            two(),
            COUNTS,
            "output_mode: complete\n".to_string(),
        ),
        (
            "ticks",
            vec![
                ("ticks", rate.to_string()),
                ("orders", files(&orders, "jsonl")),
            ],
            TICKS,
            String::new(),
        ),
    ];
    for (name, sources, sql, extra) in &queries {
        let text = spec(name, sources, &cluster.sink_path(name), sql, extra);
        client
            .submit(&text)
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}\n{text}"));
    }
    client
        .wait_committed("union", 0, Duration::from_secs(60))
        .await;
    for n in FILES / 2..FILES {
        write(n);
    }

    let tables = |extra: &[(&'static str, RecordBatch)]| {
        let mut t = vec![("orders", all(0)), ("payments", all(10))];
        t.extend_from_slice(extra);
        t
    };
    for (name, _, sql, _) in &queries {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let want = match *name {
            "joined" => {
                expected_with(sql, Vec::new(), &tables(&[("cities", inputs::cities())])).await
            }
            "ticks" => {
                let start = rate_start(&cluster.checkpoint_root(), name);
                let ticks = rate_input(start, 400, 600);
                let ticks = concat(&ticks);
                expected_with(sql, Vec::new(), &[("ticks", ticks), ("orders", all(0))]).await
            }
            _ => expected_with(sql, Vec::new(), &tables(&[])).await,
        };
        let want = match *name {
            "counts" => stringified(&want),
            _ => want,
        };
        let got = match *name {
            // Complete mode: the last batch holds every group.
            "counts" => last_batch(&cluster, name, &want).await,
            _ => committed(&cluster.sink_path(name)).await,
        };
        assert!(!want.is_empty(), "{name}: the oracle has rows");
        assert_eq!(got.len(), want.len(), "{name}: row counts differ");
        assert!(got == want, "{name}: the sink differs from the oracle");
    }
}

/// The rate stream `ticks`'s start, from its own source record.
fn rate_start(root: &Path, query: &str) -> i64 {
    let path = sluice_tests::query_dir(root, query).join(Record::RateStart.rel_in(Some("ticks")));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["start_ms"].as_i64().unwrap()
}

/// JSON rows with every number as a string, sorted, as
/// `committed_batches` gives them.
fn stringified(rows: &[String]) -> Vec<String> {
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut v: serde_json::Value = serde_json::from_str(r).unwrap();
            for (_, x) in v.as_object_mut().unwrap() {
                if x.is_number() {
                    *x = serde_json::Value::String(x.to_string());
                }
            }
            v.to_string()
        })
        .collect();
    out.sort();
    out
}

/// The rows of the last batch of a complete-mode query, sorted.
async fn last_batch(cluster: &Cluster, name: &str, want: &[String]) -> Vec<String> {
    let first: serde_json::Value = serde_json::from_str(&want[0]).unwrap();
    let fields: Vec<arrow_schema::Field> = first
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let t = match v {
                serde_json::Value::String(_) => arrow_schema::DataType::Utf8,
                _ => arrow_schema::DataType::Int64,
            };
            arrow_schema::Field::new(k, t, true)
        })
        .collect();
    let schema = std::sync::Arc::new(arrow_schema::Schema::new(fields));
    let batches = sluice_tests::oracle::committed_batches(&cluster.sink_path(name), &schema).await;
    let (_, mut rows) = batches.into_iter().next_back().expect("a batch committed");
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misused_sources_are_refused_by_name() {
    let cluster = Cluster::new("multi-stream-refusals");
    let driver = cluster.start_driver();
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let client = cluster.client(driver.addr());
    let dir = cluster.root().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    let two = vec![("a", files(&dir, "jsonl")), ("b", files(&dir, "jsonl"))];
    let sink = cluster.sink_path("out");
    let refused = |text: String| {
        let mut client = client.clone();
        async move {
            let e = client.submit(&text).await.expect_err("refused");
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
            e.message().to_string()
        }
    };
    let both = format!(
        "{}source:\n  rate: {{partitions: 1, rows_per_second: 1}}\n",
        spec(
            "both",
            &two,
            &sink,
            "SELECT * FROM a UNION ALL SELECT * FROM b",
            ""
        )
    );
    let m = refused(both).await;
    assert!(m.contains("sources") && m.contains("never both"), "{m}");
    let m = refused(spec(
        "unknown",
        &two,
        &sink,
        "SELECT * FROM a UNION ALL SELECT * FROM nope",
        "",
    ))
    .await;
    assert!(m.contains("nope"), "{m}");
    let m = refused(spec("unread", &two, &sink, "SELECT * FROM a", "")).await;
    assert!(m.contains("does not read the stream `b`"), "{m}");
    let statics = "SELECT id FROM a UNION ALL SELECT id FROM b UNION ALL SELECT 1 AS id";
    let m = refused(spec("statics", &two, &sink, statics, "")).await;
    assert!(m.contains("a UNION branch that reads no stream"), "{m}");
    let wm = "watermarks:\n  a: {column: nope, delay_ms: 10}\n";
    let m = refused(spec(
        "wm",
        &two,
        &sink,
        "SELECT * FROM a UNION ALL SELECT * FROM b",
        wm,
    ))
    .await;
    assert!(
        m.contains("watermarks.a.column") && m.contains("nope"),
        "{m}"
    );
    drop(client);
}

/// A Kafka stream beside a rate stream, each with a watermark: the query
/// reads both to the end of what they hold, each row once, and stopped,
/// its sink is exactly both streams' rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_stream_and_a_rate_stream_are_read_together_each_row_once() {
    use sluice_tests::kafka::{self, KafkaCluster, SCHEMA};
    let mut c = KafkaCluster::start("multi-stream-kafka", "events", 2).await;
    kafka::produce(&c.kafka, "events", 2, 0..300).await;
    let sink = c.cluster.sink_path("mixed");
    let text = format!(
        "name: mixed\nsources:\n  k:\n    kafka:\n      bootstrap_servers: {}\n      topic: events\n      schema: {SCHEMA}\n      starting_offsets: earliest\n  r:\n    rate: {{partitions: 2, rows_per_second: 200, total_rows: 200}}\nwatermarks:\n  k: {{column: kafka_timestamp, delay_ms: 60000}}\n  r: {{column: timestamp_ms, delay_ms: 60000}}\ntrigger:\n  interval_ms: 100\nsink:\n  files:\n    path: {}\nsql: \"SELECT value FROM k UNION ALL SELECT value + 1000000 AS value FROM r\"\n",
        c.broker.servers(),
        sink.display()
    );
    c.client.submit(&text).await.expect("submitted");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while c.client.get("mixed").await.unwrap().committed_rows < 500 {
        assert!(
            std::time::Instant::now() < deadline,
            "500 rows read in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.client.stop("mixed").await.expect("stopped");
    let want: Vec<u64> = (0..300).chain(1_000_000..1_000_200).collect();
    assert_eq!(kafka::sink_values(&sink), want);
    let offsets =
        sluice_tests::query_dir(&c.cluster.checkpoint_root(), "mixed").join(Log::Offsets.dir());
    let first = std::fs::read_dir(offsets)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(first).unwrap()).unwrap();
    assert!(plan["sources"]["k"]["kafka"].is_object(), "{plan}");
    assert!(plan["sources"]["r"]["rate"].is_object(), "{plan}");
}
