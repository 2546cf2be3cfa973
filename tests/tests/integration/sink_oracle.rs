//! The csv and Parquet sinks, Hive-style `partition_by` directories and the
//! size limit that starts a task's next file, through a real cluster: the
//! rows committed, read back from each format with the partition columns
//! taken from the directory names, equal DataFusion's one-piece result.
//! `sluice verify` checks the rate queries' sinks in every format.

use std::time::Duration;

use sluice_tests::inputs::{self, rows};
use sluice_tests::oracle::{
    committed_any, expected_batches_with, normalized, rate_input, rate_start_ms,
};
use sluice_tests::{Cluster, QueryState, Spec};

const TOTAL: u64 = 3000;
/// Every row is available at once: a first batch of max_rows_per_batch.
const RPS: u64 = 1_000_000;
const FILES: u64 = 4;

struct Case {
    name: &'static str,
    /// `None`: the rate source; else the input file format.
    input: Option<&'static str>,
    format: &'static str,
    partition_by: &'static [&'static str],
    max_file_bytes: Option<u64>,
    sql: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "rate-parquet-join",
        input: None,
        format: "parquet",
        partition_by: &[],
        max_file_bytes: None,
        sql: "SELECT value, c.country, c.pop FROM input LEFT JOIN cities c ON CAST(value % 5 AS BIGINT) = c.pop % 5",
    },
    Case {
        name: "rate-csv-by-k",
        input: None,
        format: "csv",
        partition_by: &["k"],
        max_file_bytes: None,
        sql: "SELECT value, value % 3 AS k, CASE WHEN value % 2 = 0 THEN 'even' ELSE 'odd' END AS parity FROM input",
    },
    Case {
        name: "rate-parquet-cut",
        input: None,
        format: "parquet",
        partition_by: &[],
        max_file_bytes: Some(1500),
        sql: "SELECT value, timestamp_ms, concat('v', CAST(value AS VARCHAR)) AS label FROM input WHERE value % 10 < 7",
    },
    Case {
        name: "rate-jsonl-by-two",
        input: None,
        format: "jsonl",
        partition_by: &["a", "b"],
        max_file_bytes: None,
        sql: "SELECT value, value % 2 AS a, value % 3 AS b FROM input",
    },
    Case {
        name: "files-parquet-by-city",
        input: Some("jsonl"),
        format: "parquet",
        partition_by: &["city"],
        max_file_bytes: None,
        sql: "SELECT id, city, unnest(string_to_array(tags, ',')) AS tag FROM input WHERE id % 2 = 0",
    },
    Case {
        name: "files-csv-functions",
        input: Some("parquet"),
        format: "csv",
        partition_by: &[],
        max_file_bytes: Some(4000),
        sql: "SELECT id, date_trunc('minute', ts) AS minute, round(score, 1) AS s, upper(city) AS c FROM input",
    },
    Case {
        name: "files-csv-by-band",
        input: Some("csv"),
        format: "csv",
        partition_by: &["band"],
        max_file_bytes: None,
        sql: "SELECT id, ts, city, CASE WHEN score > 50 THEN 'high' ELSE 'low' END AS band FROM input",
    },
];

fn sink_yaml(case: &Case, path: &std::path::Path) -> String {
    let mut s = format!(
        "sink:\n  files:\n    path: {}\n    format: {}\n",
        path.display(),
        case.format
    );
    if !case.partition_by.is_empty() {
        s.push_str(&format!(
            "    partition_by: [{}]\n",
            case.partition_by.join(", ")
        ));
    }
    if let Some(n) = case.max_file_bytes {
        s.push_str(&format!("    max_file_bytes: {n}\n"));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sink_format_and_layout_commits_what_datafusion_computes() {
    let cluster = Cluster::new("sink-oracle");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let dir = |format: &str| cluster.root().join(format!("in-{format}"));
    for format in ["jsonl", "csv", "parquet"] {
        std::fs::create_dir_all(dir(format)).unwrap();
        for n in 0..FILES {
            inputs::write(
                &dir(format),
                &format!("f-{n}.{format}"),
                format,
                &rows(n, 250),
            );
        }
    }

    let cities = cluster.root().join("cities.csv");
    std::fs::write(&cities, inputs::encode("csv", &inputs::cities())).unwrap();
    for case in CASES {
        let sink = cluster.sink_path(case.name);
        let text = match case.input {
            None => {
                let rate = Spec::new(case.name, &sink)
                    .partitions(1)
                    .rows_per_second(RPS)
                    .total_rows(TOTAL)
                    .max_rows_per_batch(2500)
                    .interval_ms(0)
                    .sql(case.sql)
                    .to_yaml();
                // The spec's own sink, replaced by this case's.
                let head = &rate[..rate.find("sink:").expect("a sink")];
                let tail = &rate[rate.find("sql:").expect("sql")..];
                format!("{head}{}{tail}", sink_yaml(case, &sink))
            }
            Some(format) => {
                let spec = inputs::spec(case.name, &dir(format), format, &sink, case.sql, FILES);
                let head = &spec[..spec.find("sink:").expect("a sink")];
                let tail = &spec[spec.find("sql:").expect("sql")..];
                format!("{head}{}{tail}", sink_yaml(case, &sink))
            }
        };
        let text = if case.sql.contains("cities") {
            text + &inputs::cities_table_yaml(&cities, "csv")
        } else {
            text
        };
        client
            .submit(&text)
            .await
            .unwrap_or_else(|e| panic!("{}: submit refused: {e}\n{text}", case.name));
    }

    for case in CASES {
        let status = client
            .wait_state(case.name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{}: {status:#?}", case.name);
        let input = match case.input {
            None => rate_input(
                rate_start_ms(&cluster.checkpoint_root(), case.name),
                RPS,
                TOTAL,
            ),
            Some(_) => (0..FILES).map(|n| rows(n, 250)).collect(),
        };
        let want = expected_batches_with(case.sql, input, &[("cities", inputs::cities())]).await;
        let schema = want[0].schema();
        let want_rows: Vec<String> =
            String::from_utf8(sluice_common::sink::encode_jsonl(&want).unwrap())
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
        let sink = cluster.sink_path(case.name);
        let got = committed_any(&sink, &schema).await;
        assert_eq!(
            got.len(),
            want_rows.len(),
            "{}: row counts differ",
            case.name
        );
        assert!(
            got == normalized(&want_rows),
            "{}: the sink differs from the oracle",
            case.name
        );

        let parts: Vec<String> = sluice_tests::files_under(&sink)
            .iter()
            .map(|p| {
                p.strip_prefix(&sink)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let ext = format!(".{}", case.format);
        assert!(
            parts.iter().any(|p| p.ends_with(&ext)),
            "{}: {parts:?}",
            case.name
        );
        for col in case.partition_by {
            let prefix = format!("{col}=");
            assert!(
                parts
                    .iter()
                    .any(|p| p.split('/').any(|s| s.starts_with(&prefix))),
                "{}: no {col}= directory in {parts:?}",
                case.name
            );
        }
        if case.max_file_bytes.is_some() {
            assert!(
                parts.iter().any(|p| p.contains("-0001.")),
                "{}: a task that outgrew the limit started a second file: {parts:?}",
                case.name
            );
        }
        // A join repeats values by design; the others keep each value once.
        if case.input.is_none() && !case.sql.contains("JOIN") {
            // The checker reads `value` back from every format.
            let total = TOTAL.to_string();
            let args = [
                "verify",
                "--sink",
                sink.to_str().unwrap(),
                "--total-rows",
                &total,
                "--json",
            ];
            let out = cluster.cli(&drivers, &args).await;
            let report = out.json();
            assert_eq!(report["duplicated"], 0, "{}: {report}", case.name);
            assert_eq!(report["uncommitted_files"], 0, "{}: {report}", case.name);
            let missing = if case.sql.contains("WHERE") {
                TOTAL * 3 / 10
            } else {
                0
            };
            assert_eq!(report["missing"], missing, "{}: {report}", case.name);
            assert_eq!(report["rows"], TOTAL - missing, "{}: {report}", case.name);
        }
    }
}
