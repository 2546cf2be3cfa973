//! Unit tests of `task.rs`: the pure decisions, and one rate task into a
//! temporary sink.

use super::*;
use crate::map::plan;
use tokio::sync::Semaphore;

fn slot() -> OwnedSemaphorePermit {
    Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap()
}

use crate::sink::files::files_of as files;
use crate::sink::files_path;
use sluice_proto::{
    FilesTaskSink, RateTask, SinkFormat, TaskSink, TaskSource, task_sink, task_source,
};

fn assignment(dir: &str, partition: u32, start: u64, end: u64) -> TaskAssignment {
    TaskAssignment {
        task_id: "t1".into(),
        query_id: "q".into(),
        query_name: "demo".into(),
        batch_id: 7,
        partition,
        attempt: 0,
        epoch: 3,
        source: Some(TaskSource {
            kind: Some(task_source::Kind::Rate(RateTask {
                partitions: 2,
                rows_per_second: 10,
                start_ms: 1_000,
                start_value: start,
                end_value: end,
                partition_count: 1,
                first_partition: partition,
            })),
            table: String::new(),
        }),
        sink: Some(TaskSink {
            kind: Some(task_sink::Kind::Files(FilesTaskSink {
                path: dir.into(),
                format: SinkFormat::Jsonl.into(),
                ..Default::default()
            })),
        }),
        work: Some(sluice_proto::task_assignment::Work::Map(
            sluice_proto::MapWork {},
        )),
        plan: Some(sluice_proto::TaskPlan {
            sql: "SELECT * FROM input".into(),
            streams: vec![sluice_proto::StreamPlan {
                name: "input".into(),
                schema: sluice_sql::encode_schema(&sluice_common::rate::schema()),
            }],
            tables: Vec::new(),
            plan_budget_ms: 0,
            max_output_bytes: 0,
        }),
        ..Default::default()
    }
}

fn with_sql(mut t: TaskAssignment, sql: &str) -> TaskAssignment {
    t.plan.as_mut().unwrap().sql = sql.into();
    t
}

#[tokio::test]
async fn a_task_runs_its_sql_and_reports_rows_read_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let sinks = Arc::new(Caches::default());
    let sql = "SELECT value, value % 4 AS k FROM input WHERE value % 4 = 0";
    let r = execute(
        with_sql(assignment(&root, 0, 0, 40), sql),
        slot(),
        sinks.clone(),
    )
    .await;
    let Some(Outcome::Ok(out)) = r.outcome else {
        panic!("task failed: {r:?}");
    };
    assert_eq!((out.input_rows, out.rows), (20, 10));
    let text = std::fs::read_to_string(dir.path().join(&files(&out)[0].path)).unwrap();
    assert_eq!(text.lines().next(), Some(r#"{"value":0,"k":0}"#));
    // Determinism: a second run writes the same bytes, and is adopted.
    let first = std::fs::read(dir.path().join(&files(&out)[0].path)).unwrap();
    let again = execute(with_sql(assignment(&root, 0, 0, 40), sql), slot(), sinks).await;
    assert!(matches!(again.outcome, Some(Outcome::Ok(ref o)) if o.rows == 10));
    assert_eq!(
        std::fs::read(dir.path().join(&files(&out)[0].path)).unwrap(),
        first
    );
}

#[tokio::test]
async fn a_task_whose_query_keeps_no_row_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let t = with_sql(
        assignment(&root, 0, 0, 40),
        "SELECT * FROM input WHERE value > 1000",
    );
    let r = execute(t, slot(), Arc::new(Caches::default())).await;
    let Some(Outcome::Ok(out)) = r.outcome else {
        panic!("task failed: {r:?}");
    };
    assert_eq!((out.input_rows, out.rows, files(&out).len()), (20, 0, 0));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_task_run_twice_writes_the_same_bytes_in_every_format() {
    let sql =
        "SELECT value, value % 7 AS k, CAST(value AS VARCHAR) AS s FROM input WHERE value % 3 <> 0";
    for (format, partition_by) in [
        (SinkFormat::Jsonl, vec![]),
        (SinkFormat::Csv, vec![]),
        (SinkFormat::Parquet, vec!["k".to_string()]),
    ] {
        let mut runs = Vec::new();
        for _ in 0..2 {
            let dir = tempfile::tempdir().unwrap();
            let mut t = with_sql(assignment(dir.path().to_str().unwrap(), 1, 0, 5_000), sql);
            let Some(task_sink::Kind::Files(f)) = t.sink.as_mut().and_then(|s| s.kind.as_mut())
            else {
                panic!("a file sink")
            };
            f.format = format.into();
            f.partition_by = partition_by.clone();
            let r = execute(t, slot(), Arc::new(Caches::default())).await;
            let Some(Outcome::Ok(out)) = r.outcome else {
                panic!("{format:?} task failed: {r:?}");
            };
            let files: Vec<(String, Vec<u8>)> = files(&out)
                .iter()
                .map(|f| {
                    (
                        f.path.clone(),
                        std::fs::read(dir.path().join(&f.path)).unwrap(),
                    )
                })
                .collect();
            assert!(!files.is_empty(), "{format:?}");
            runs.push(files);
        }
        assert_eq!(runs[0], runs[1], "{format:?}: two runs of one task differ");
    }
}

#[test]
fn admission_refuses_only_older_epochs() {
    assert_eq!(admit(5, 5), Admission::Run);
    assert_eq!(admit(6, 5), Admission::Run);
    assert_eq!(admit(0, 0), Admission::Run);
    assert_eq!(admit(4, 5), Admission::Stale { max_seen: 5 });
}

#[test]
fn error_kinds() {
    use sluice_common::Error as E;
    assert_eq!(
        error_kind(&E::Conflict { path: "p".into() }),
        ErrorKind::Fatal
    );
    assert_eq!(error_kind(&E::Encoding("e".into())), ErrorKind::Fatal);
    assert_eq!(error_kind(&E::Config("c".into())), ErrorKind::Fatal);
    let corrupt = E::Corrupt {
        path: "p".into(),
        reason: "r".into(),
    };
    assert_eq!(error_kind(&corrupt), ErrorKind::Fatal);
    let e = task_error(&ExecutorError::Common(E::Conflict {
        path: "/out/part-1".into(),
    }));
    assert_eq!(e.kind(), ErrorKind::Fatal);
    assert!(e.message.contains("/out/part-1"), "{}", e.message);
    assert_eq!(
        task_error(&ExecutorError::Draining).kind(),
        ErrorKind::Retryable
    );
    let stale = ExecutorError::StaleEpoch {
        task_epoch: 1,
        max_seen: 2,
    };
    assert_eq!(task_error(&stale).kind(), ErrorKind::StaleEpoch);
    let malformed = ExecutorError::MalformedTask("x".into());
    assert_eq!(task_error(&malformed).kind(), ErrorKind::Fatal);
    let refused = ExecutorError::PathNotAllowed("sink.files.path: /x".into());
    assert_eq!(task_error(&refused).kind(), ErrorKind::Fatal);
    // A panic is a fault that a retry meets again, never transient.
    let panicked = ExecutorError::TaskPanicked("index out of bounds".into());
    assert_eq!(task_error(&panicked).kind(), ErrorKind::Fatal);
}

/// A task whose sink is outside `--allowed-paths` fails at once, naming
/// the field, and writes nothing.
#[tokio::test]
async fn a_task_outside_the_allowed_paths_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("out");
    let allowed = dir.path().join("allowed");
    let allowed =
        sluice_common::storage::AllowedPaths::parse(&[allowed.to_str().unwrap()]).unwrap();
    let caches = Caches::new(0, Default::default(), Some(allowed));
    let t = assignment(sink.to_str().unwrap(), 0, 0, 40);
    let r = execute(t, slot(), Arc::new(caches)).await;
    let Some(Outcome::Error(e)) = r.outcome else {
        panic!("the task ran: {r:?}");
    };
    assert_eq!(e.kind(), ErrorKind::Fatal);
    assert!(
        e.message.contains("sink.files.path") && e.message.contains("--allowed-paths"),
        "{}",
        e.message
    );
    assert!(!sink.exists());
}

/// A sink under a regular file can never be written (ENOTDIR): a fatal
/// error, not a storage error retried forever.
#[tokio::test]
async fn a_sink_under_a_file_is_a_fatal_error_naming_the_path() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let root = file.path().join("out");
    let root = root.to_str().unwrap();
    let sinks = Arc::new(Caches::default());
    let r = execute(assignment(root, 0, 0, 10), slot(), sinks).await;
    let Some(Outcome::Error(e)) = r.outcome else {
        panic!("expected an error: {r:?}");
    };
    assert_eq!(e.kind(), ErrorKind::Fatal);
    assert!(e.message.contains(root), "{}", e.message);
}

#[test]
fn plans_reject_malformed_assignments() {
    let good = assignment("/tmp/out", 1, 0, 10);
    let p = plan(&good, &Default::default()).unwrap();
    assert_eq!(
        (
            p.batch_id,
            p.partition,
            good.sink.as_ref().and_then(files_path)
        ),
        (7, 1, Some("/tmp/out"))
    );

    let mut no_source = good.clone();
    no_source.source = None;
    let mut no_sink = good.clone();
    no_sink.sink = None;
    let mut bad_partition = good.clone();
    if let Some(task_source::Kind::Rate(r)) =
        bad_partition.source.as_mut().and_then(|s| s.kind.as_mut())
    {
        r.first_partition = 2;
    }
    let mut no_plan = good.clone();
    no_plan.plan = None;
    let mut other_schema = good.clone();
    other_schema.plan.as_mut().unwrap().streams[0].schema =
        sluice_sql::encode_schema(&arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "x",
            arrow_schema::DataType::Utf8,
            true,
        )]));
    for (t, want) in [
        (no_source, "missing source"),
        (no_sink, "missing sink"),
        (bad_partition, "partition"),
        (no_plan, "missing plan"),
        (other_schema, "input schema"),
    ] {
        let Err(e) = plan(&t, &Default::default()) else {
            panic!("{want}: the plan was accepted");
        };
        assert!(matches!(e, ExecutorError::MalformedTask(_)));
        assert!(e.to_string().contains(want), "{e}");
        assert_eq!(task_error(&e).kind(), ErrorKind::Fatal);
    }
}

#[tokio::test]
async fn a_rate_task_writes_its_part_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let sinks = Arc::new(Caches::default());

    let r = execute(assignment(&root, 0, 0, 10), slot(), sinks.clone()).await;
    assert_eq!((r.task_id.as_str(), r.epoch), ("t1", 3));
    let Some(Outcome::Ok(out)) = r.outcome else {
        panic!("task failed: {r:?}");
    };
    assert_eq!((out.rows, out.input_rows), (5, 5));
    assert_eq!(files(&out).len(), 1);
    let f = &files(&out)[0];
    assert_eq!(f.path, "part-00000000000000000007-00000.jsonl");
    assert_eq!(f.rows, 5);
    let text = std::fs::read_to_string(dir.path().join(&f.path)).unwrap();
    assert_eq!(f.bytes, text.len() as u64);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0], r#"{"value":0,"timestamp_ms":1000}"#);
    assert_eq!(lines[1], r#"{"value":2,"timestamp_ms":1200}"#);
    assert_eq!(lines[4], r#"{"value":8,"timestamp_ms":1800}"#);

    // A retry writes identical bytes and is adopted.
    let again = execute(assignment(&root, 0, 0, 10), slot(), sinks.clone()).await;
    assert!(matches!(again.outcome, Some(Outcome::Ok(ref o)) if o.rows == 5));

    // No rows: no file.
    let empty = execute(assignment(&root, 1, 4, 5), slot(), sinks).await;
    let Some(Outcome::Ok(out)) = empty.outcome else {
        panic!("empty task failed: {empty:?}");
    };
    assert_eq!((out.rows, files(&out).len()), (0, 0));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}
