//! The file source through a real cluster: jsonl, csv and Parquet files,
//! some present at submit and some added while the queries run, split into
//! byte ranges smaller than a file. For each query shape, the rows the sink
//! committed equal, as multisets, DataFusion's result over all the input
//! rows computed here in one piece.

use sluice_common::checkpoint::Log;
use std::time::Duration;

use sluice_tests::inputs::{self, rows};
use sluice_tests::oracle::{committed, expected_with};
use sluice_tests::{Cluster, DriverOpts, QueryState};

const FILES: u64 = 6;
const ROWS: u64 = 300;

const PROJECT: &str = "SELECT id, id % 7 AS m, upper(city) AS c, \
     CASE WHEN score > 50 THEN 'high' WHEN score > 20 THEN 'mid' ELSE 'low' END AS band FROM input";
const FILTER: &str = "SELECT id, ts, city FROM input WHERE id % 3 = 0 AND city IS NOT NULL";
const UNNEST: &str =
    "SELECT id, unnest(string_to_array(tags, ',')) AS tag FROM input WHERE id % 2 = 0";
const FUNCTIONS: &str = "SELECT id, date_trunc('minute', ts) AS minute, round(score, 1) AS s, \
     length(city) AS n, concat(city, '-', CAST(id AS VARCHAR)) AS label FROM input";

const JOIN: &str = "SELECT i.id, i.city, c.country, c.pop * 2 AS pop2 \
     FROM input i JOIN cities c ON i.city = c.name WHERE i.id % 2 = 1";

/// (query, format, sql): every shape runs on two formats or more, and
/// every format runs two shapes or more. The join reads the static table
/// `cities`: a csv file for jsonl input, a directory of Parquet for Parquet.
const QUERIES: &[(&str, &str, &str)] = &[
    ("jsonl-join", "jsonl", JOIN),
    ("parquet-join", "parquet", JOIN),
    ("jsonl-project", "jsonl", PROJECT),
    ("jsonl-unnest", "jsonl", UNNEST),
    ("csv-filter", "csv", FILTER),
    ("csv-functions", "csv", FUNCTIONS),
    ("csv-project", "csv", PROJECT),
    ("parquet-unnest", "parquet", UNNEST),
    ("parquet-filter", "parquet", FILTER),
    ("parquet-functions", "parquet", FUNCTIONS),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_and_format_commits_what_datafusion_computes_in_one_piece() {
    let cluster = Cluster::new("file-oracle");
    let driver = cluster.start_driver_with(DriverOpts {
        // Ranges far smaller than a file: every file is split.
        extra_args: vec!["--max-bytes-per-task".into(), "3000".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    let dir = |format: &str| cluster.root().join(format!("in-{format}"));
    let write = |format: &str, n: u64| {
        let name = format!("part-{n:03}.{format}");
        inputs::write(&dir(format), &name, format, &rows(n, ROWS));
    };
    for format in ["jsonl", "csv", "parquet"] {
        std::fs::create_dir_all(dir(format)).unwrap();
        // Files a source must not read: hidden and metadata names.
        std::fs::write(dir(format).join("_SUCCESS"), "").unwrap();
        std::fs::write(dir(format).join(".part-999.tmp"), "half a file").unwrap();
        for n in 0..FILES / 2 {
            write(format, n);
        }
    }
    let cities_csv = cluster.root().join("cities.csv");
    std::fs::write(&cities_csv, inputs::encode("csv", &inputs::cities())).unwrap();
    let cities_dir = cluster.root().join("cities");
    std::fs::create_dir_all(&cities_dir).unwrap();
    inputs::write(&cities_dir, "c.parquet", "parquet", &inputs::cities());
    for (name, format, sql) in QUERIES {
        let mut spec = inputs::spec(
            name,
            &dir(format),
            format,
            &cluster.sink_path(name),
            sql,
            FILES,
        );
        if sql.contains("cities") {
            spec.push_str(&match *format {
                "parquet" => inputs::cities_table_yaml(&cities_dir, "parquet"),
                _ => inputs::cities_table_yaml(&cities_csv, "csv"),
            });
        }
        client
            .submit(&spec)
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}"));
    }
    // The rest arrive while the queries run.
    client
        .wait_committed(QUERIES[0].0, 0, Duration::from_secs(60))
        .await;
    for format in ["jsonl", "csv", "parquet"] {
        for n in FILES / 2..FILES {
            write(format, n);
        }
    }

    let input: Vec<_> = (0..FILES).map(|n| rows(n, ROWS)).collect();
    // The first batch's plan: its two files, cut into more tasks than files.
    for (name, _, _) in QUERIES {
        // Each query plans its first batch on its own schedule.
        client
            .wait_committed(name, 0, Duration::from_secs(60))
            .await;
        let path =
            sluice_tests::query_dir(&cluster.checkpoint_root(), name).join(Log::Offsets.entry(0));
        let plan: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let files = &plan["source"]["files"]["files"];
        let tasks = plan["source"]["files"]["tasks"].as_array().unwrap();
        assert_eq!(
            files[0]["path"],
            "part-000.jsonl".replace("jsonl", name.split('-').next().unwrap())
        );
        assert_eq!(files.as_array().unwrap().len(), 2, "{name}: {plan}");
        assert!(tasks.len() > 2, "{name}: files are split: {plan}");
    }
    for (name, _, sql) in QUERIES {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        assert!(
            status.last_committed_batch >= 2,
            "{name}: two files a batch: {status:#?}"
        );
        let want = expected_with(sql, input.clone(), &[("cities", inputs::cities())]).await;
        let got = committed(&cluster.sink_path(name)).await;
        assert!(!want.is_empty(), "{name}: the oracle has rows");
        assert_eq!(got.len(), want.len(), "{name}: row counts differ");
        assert!(got == want, "{name}: the sink differs from the oracle");
    }
}
