//! Bad file-source input, each with the error a user sees: a spec that
//! cannot work is refused at submit naming the field; a malformed record
//! fails the query naming the file and line, or is skipped and counted
//! with `on_bad_record: skip` while every good row is committed.

use sluice_common::checkpoint::Record;
use std::time::Duration;

use sluice_tests::inputs::{self, SCHEMA_YAML, rows};
use sluice_tests::oracle::{committed, expected};
use sluice_tests::{Cluster, QueryState, query_dir};
use tonic::Code;

fn files_spec(name: &str, dir: &str, body: &str, sink: &std::path::Path) -> String {
    format!(
        "name: {name}\nsource:\n  files:\n    path: {dir}\n{body}sink:\n  files:\n    path: {}\n",
        sink.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_source_that_cannot_work_is_refused_naming_the_field() {
    let cluster = Cluster::new("bad-file-specs");
    let driver = cluster.start_ready_driver().await;
    let mut client = cluster.client(driver.addr());
    let empty = cluster.root().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let not_json = cluster.root().join("not-json");
    std::fs::create_dir_all(&not_json).unwrap();
    std::fs::write(not_json.join("a.jsonl"), "this is not json\n").unwrap();
    let missing = cluster.root().join("missing");
    let e = empty.display().to_string();
    let schema = format!("    schema:\n{SCHEMA_YAML}");
    let cases: Vec<(String, String, Vec<&str>)> = vec![
        (
            missing.display().to_string(),
            format!("    format: jsonl\n{schema}"),
            vec!["source.files.path", "does not exist"],
        ),
        (
            e.clone(),
            "    format: jsonl\n".into(),
            vec!["source.files.schema", "required for jsonl", "infer: true"],
        ),
        (
            e.clone(),
            "    format: csv\n    infer: true\n".into(),
            vec!["source.files.infer", "no file in", "declare `schema`"],
        ),
        (
            not_json.display().to_string(),
            "    format: jsonl\n    infer: true\n".into(),
            vec!["source.files.infer", "cannot infer a schema from", "a.jsonl"],
        ),
        (
            e.clone(),
            "    format: jsonl\n    schema:\n      - {name: id, type: bigint}\n      - {name: at, type: instant}\n".into(),
            vec!["source.files.schema[1]", "unknown type \"instant\"", "bigint"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}    csv: {{header: false}}\n"),
            vec!["source.files.csv", "format jsonl"],
        ),
        (
            e.clone(),
            format!("    format: csv\n{schema}    csv: {{delimiter: \"::\"}}\n"),
            vec!["source.files.csv.delimiter", "one ASCII character"],
        ),
        (
            e.clone(),
            format!("    format: avro\n{schema}"),
            vec!["source.files.format", "avro"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}    max_files_per_batch: 0\n"),
            vec!["source.files.max_files_per_batch"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}sql: SELECT nope FROM input\n"),
            vec!["field `sql`", "nope"],
        ),
        (
            e.clone(),
            format!(
                "    format: jsonl\n{schema}tables:\n  cities:\n    path: {}\n    format: csv\n    infer: true\n",
                missing.display()
            ),
            vec!["tables.cities.path", "does not exist"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}tables:\n  cities:\n    path: {e}\n    format: csv\n"),
            vec!["tables.cities.schema", "required for csv"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}tables:\n  input:\n    path: {e}\n    format: parquet\n"),
            vec!["tables.input", "the stream's table"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}tables:\n  Big-Name:\n    path: {e}\n    format: parquet\n"),
            vec!["tables.Big-Name", "[a-z_][a-z0-9_]"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}tables:\n  cities:\n    path: {e}\n    format: parquet\n"),
            vec!["tables.cities.schema", "no file in"],
        ),
        (
            e.clone(),
            format!("    format: jsonl\n{schema}sql: SELECT i.id FROM input i JOIN towns t ON i.id = t.id\n"),
            vec!["field `sql`", "towns"],
        ),
    ];
    for (i, (dir, body, wanted)) in cases.iter().enumerate() {
        let name = format!("bad-{i}");
        let spec = files_spec(&name, dir, body, &cluster.sink_path(&name));
        let err = client.submit(&spec).await.expect_err(&spec);
        assert_eq!(err.code(), Code::InvalidArgument, "{spec}: {err:?}");
        for w in wanted {
            assert!(
                err.message().contains(w),
                "{spec}: {w:?} not in {:?}",
                err.message()
            );
        }
        let dir = query_dir(&cluster.checkpoint_root(), &name);
        assert!(
            !dir.join(Record::Metadata.rel()).exists(),
            "{name}: nothing is created"
        );
    }
}

/// Two files; the second has a bad record on its line 4 and another on
/// line 6 (counting a csv header as line 1).
fn bad_input(dir: &std::path::Path, format: &str) -> Vec<arrow_array::RecordBatch> {
    std::fs::create_dir_all(dir).unwrap();
    inputs::write(dir, &format!("a.{format}"), format, &rows(0, 50));
    let good = rows(1, 6);
    let text = String::from_utf8(inputs::encode(format, &good)).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let broken = if format == "csv" {
        "7,not a time,x"
    } else {
        "{\"id\": \"seven\"}"
    };
    lines.insert(3, broken.to_string());
    lines.insert(5, "{{{".to_string());
    std::fs::write(dir.join(format!("b.{format}")), lines.join("\n") + "\n").unwrap();
    vec![rows(0, 50), good]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_record_fails_naming_file_and_line_or_is_skipped_and_counted() {
    let cluster = Cluster::new("bad-records");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let schema = format!("    schema:\n{SCHEMA_YAML}");
    for format in ["jsonl", "csv"] {
        let dir = cluster.root().join(format!("in-{format}"));
        let input = bad_input(&dir, format);
        let d = dir.display().to_string();
        let line = 4;
        let fail = format!("fail-{format}");
        let body = format!("    format: {format}\n{schema}    total_files: 2\n");
        client
            .submit(&files_spec(&fail, &d, &body, &cluster.sink_path(&fail)))
            .await
            .unwrap();
        let status = client
            .wait_state(&fail, QueryState::Failed, Duration::from_secs(60))
            .await;
        for w in [
            format!("b.{format} line {line}"),
            "on_bad_record: skip".into(),
        ] {
            assert!(status.error.contains(&w), "{w:?} not in {:?}", status.error);
        }
        assert!(
            committed(&cluster.sink_path(&fail)).await.is_empty(),
            "nothing committed"
        );

        let skip = format!("skip-{format}");
        let body =
            format!("    format: {format}\n{schema}    on_bad_record: skip\n    total_files: 2\n");
        client
            .submit(&files_spec(&skip, &d, &body, &cluster.sink_path(&skip)))
            .await
            .unwrap();
        let status = client
            .wait_state(&skip, QueryState::Finished, Duration::from_secs(60))
            .await;
        assert_eq!(
            status.latest_progress.as_ref().map(|p| p.bad_records),
            Some(2),
            "{status:#?}"
        );
        let want = expected("SELECT * FROM input", input).await;
        assert_eq!(
            committed(&cluster.sink_path(&skip)).await,
            want,
            "every good row, once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_layout_that_cannot_work_is_refused_naming_the_field() {
    let cluster = Cluster::new("bad-sink-layout");
    let driver = cluster.start_ready_driver().await;
    let mut client = cluster.client(driver.addr());
    let sql = "SELECT value, value % 3 AS k FROM input";
    let cases: &[(&str, &[&str])] = &[
        (
            "    format: avro\n",
            &["sink.files.format", "avro", "jsonl, csv, parquet"],
        ),
        (
            "    partition_by: [nope]\n",
            &[
                "sink.files.partition_by[0]",
                "\"nope\" is not an output column",
                "value, k",
            ],
        ),
        (
            "    partition_by: [value, k]\n",
            &["sink.files.partition_by", "every output column"],
        ),
        (
            "    partition_by: [k, k]\n",
            &["sink.files.partition_by[1]", "named twice"],
        ),
        (
            "    max_file_bytes: 0\n",
            &["sink.files.max_file_bytes", "at least 1"],
        ),
    ];
    for (i, (extra, wanted)) in cases.iter().enumerate() {
        let name = format!("bad-sink-{i}");
        let sink = cluster.sink_path(&name);
        let spec = format!(
            "name: {name}\nsource:\n  rate:\n    partitions: 1\n    rows_per_second: 10\nsink:\n  files:\n    path: {}\n{extra}sql: {sql}\n",
            sink.display()
        );
        let err = client.submit(&spec).await.expect_err(&spec);
        assert_eq!(err.code(), Code::InvalidArgument, "{spec}: {err:?}");
        for w in *wanted {
            assert!(
                err.message().contains(w),
                "{spec}: {w:?} not in {:?}",
                err.message()
            );
        }
    }
}
