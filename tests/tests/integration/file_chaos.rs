//! The file-source SQL oracle through chaos. A csv file source, filtered,
//! projected with a CASE and LEFT JOINed with a static csv table, writes
//! Parquet while the driver is SIGKILLed twice (restarted in place on the
//! same ports and checkpoint root, without resubmission), an executor is
//! SIGKILLed once (and restarted; a second one stays up), and input files
//! keep arriving, some while the driver is down. Every kill waits for a
//! batch in flight; the seeded rng picks the order of the kills and their
//! timing (replay with `SLUICE_TEST_SEED=N`). The query ends FINISHED once
//! `total_files` are committed, and:
//!
//! - the sink's rows equal, as multisets, DataFusion's result over every
//!   input row: nothing lost, nothing duplicated;
//! - each batch's rows equal DataFusion's result over the file its plan
//!   names, so a batch replayed after a driver kill read the same file;
//! - the checkpoint puts every input file in exactly one batch:
//!   `sources/files/N` and `offsets/N` agree, with the files' sizes;
//! - commit epochs never decrease, a batch in flight at a driver kill
//!   commits under a later epoch than it was planned under, and the last
//!   batch commits two driver epochs after the first was planned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_common::checkpoint::{Log, OffsetRecord, SourceOffsets};
use sluice_tests::ha::wait_batch_in_flight;
use sluice_tests::inputs::{self, rows};
use sluice_tests::oracle::{committed_any, committed_batches, expected_batches_with, normalized};
use sluice_tests::{
    Cluster, DriverOpts, QueryState, READY_TIMEOUT, assert_epochs_non_decreasing, commit_epochs,
    file_log, latest_entry, offset_records, test_rng,
};

const QUERY: &str = "file-chaos";
const FILES: u64 = 10;
/// Files present at submit; the others arrive while the query runs.
const UPFRONT: u64 = 4;
const ROWS: u64 = 1500;

const SQL: &str = "SELECT i.id, i.ts, upper(i.city) AS c, c.country, c.pop * 2 AS pop2, \
     CASE WHEN i.score > 60 THEN 'high' WHEN i.score > 25 THEN 'mid' ELSE 'low' END AS band \
     FROM input i LEFT JOIN cities c ON i.city = c.name WHERE i.id % 4 <> 1";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kill {
    Driver,
    Executor,
}

fn file_name(n: u64) -> String {
    format!("part-{n:03}.csv")
}

/// The rows of the input file called `name`.
fn file_rows(name: &str) -> RecordBatch {
    let n = name
        .strip_prefix("part-")
        .and_then(|s| s.strip_suffix(".csv"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not an input file"));
    rows(n, ROWS)
}

/// DataFusion's result of [`SQL`] over `input`: its schema and its rows,
/// normalized as the sink's are.
async fn oracle(input: Vec<RecordBatch>) -> (SchemaRef, Vec<String>) {
    let out = expected_batches_with(SQL, input, &[("cities", inputs::cities())]).await;
    let jsonl = sluice_common::sink::encode_jsonl(&out).expect("oracle rows encode");
    let lines: Vec<String> = String::from_utf8(jsonl)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect();
    (out[0].schema(), normalized(&lines))
}

/// The path of the query's `offsets/N`.
fn plan_path(root: &Path, n: u64) -> PathBuf {
    sluice_tests::query_dir(root, QUERY).join(Log::Offsets.entry(n))
}

/// The latest planned and committed batches of the query.
fn progress(root: &Path) -> (Option<u64>, Option<u64>) {
    let last = |log| latest_entry(root, QUERY, log).map(|e| e.0);
    (last(Log::Offsets), last(Log::Commits))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_source_sql_is_exact_through_driver_and_executor_kills() {
    let mut rng = test_rng();
    let started = Instant::now();
    let cluster = Cluster::new("file-chaos");
    let driver = cluster.start_driver_with(DriverOpts {
        // A file (about 88 kB) is cut into 8 tasks, more than the 4 slots:
        // both executors are busy while a batch is in flight.
        extra_args: vec!["--max-bytes-per-task".into(), "12000".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let victim = cluster.start_executor(&drivers);
    let survivor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    let dir = cluster.root().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    let add = |n: u64| inputs::write(&dir, &file_name(n), "csv", &rows(n, ROWS));
    (0..UPFRONT).for_each(add);
    let cities = cluster.root().join("cities.csv");
    std::fs::write(&cities, inputs::encode("csv", &inputs::cities())).unwrap();
    let sink = cluster.sink_path(QUERY);
    let spec = inputs::spec(QUERY, &dir, "csv", &sink, SQL, FILES)
        .replace("max_files_per_batch: 2", "max_files_per_batch: 1")
        .replace("\nsql: ", "\n    format: parquet\nsql: ")
        + &inputs::cities_table_yaml(&cities, "csv");
    assert!(spec.contains("max_files_per_batch: 1") && spec.contains("format: parquet"));
    let id = client.submit(&spec).await.expect("submit").id;

    // Two driver kills and one executor kill, in a seeded order.
    let mut kills = [Kill::Driver; 3];
    kills[rng.between(0, 2) as usize] = Kill::Executor;
    let root = cluster.checkpoint_root();
    let mut next = UPFRONT;
    // Batches a driver kill caught in flight: (batch, its plan then).
    let mut in_flight: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut after: Option<u64> = None;
    for (k, kill) in kills.iter().enumerate() {
        // Past the previous kill: the batch it hit, or the next, has
        // committed (there are files enough for either).
        if let Some(n) = after {
            let n = n + rng.between(0, 1);
            client
                .wait_committed(QUERY, n as i64, Duration::from_secs(30))
                .await;
        }
        add(next);
        next += 1;
        assert!(
            wait_batch_in_flight(&root, QUERY, Duration::from_secs(20)).await,
            "kill {k}: no batch in flight; progress {:?}",
            progress(&root)
        );
        // Batches take about 200 ms here: a kill lands at a random point of
        // the batch, before or after its tasks started.
        tokio::time::sleep(rng.millis(0, 80)).await;
        match kill {
            Kill::Driver => driver.kill(),
            Kill::Executor => victim.kill(),
        };
        let (planned, committed) = progress(&root);
        eprintln!("kill {k}: {kill:?} with batch {planned:?} planned, {committed:?} committed");
        after = planned;
        // A file arrives while the victim is down.
        add(next);
        next += 1;
        let pause = rng.millis(0, 400);
        match kill {
            Kill::Driver => {
                // The driver is dead: nothing can commit the batch now.
                if let Some(n) = planned.filter(|&n| Some(n) != committed) {
                    in_flight.push((n, std::fs::read(plan_path(&root, n)).unwrap()));
                }
                tokio::time::sleep(pause).await;
                driver.restart_ready().await;
                let status = client
                    .wait_for(QUERY, "reloaded", Duration::from_secs(30), |_| true)
                    .await;
                assert_eq!(status.id, id, "the restarted driver resumed the same query");
            }
            Kill::Executor => {
                tokio::time::sleep(pause).await;
                victim.restart();
            }
        }
    }
    assert_eq!(next, FILES, "every file was added");

    let status = client
        .wait_state(QUERY, QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    assert_eq!(status.id, id);
    assert_eq!(driver.starts(), 3, "the driver ran three times");
    assert!(survivor.is_running(), "the other executor stayed up");
    let caught: Vec<u64> = in_flight.iter().map(|b| b.0).collect();
    eprintln!("batches in flight at a driver kill: {caught:?}");
    assert!(
        !caught.is_empty(),
        "no driver kill caught a batch in flight"
    );

    // (a) Nothing lost or duplicated: the whole sink against the oracle.
    let all: Vec<RecordBatch> = (0..FILES).map(|n| rows(n, ROWS)).collect();
    let (schema, want) = oracle(all).await;
    let got = committed_any(&sink, &schema).await;
    assert_eq!(got.len(), want.len(), "row counts differ");
    assert!(got == want, "the sink differs from the oracle");

    // (b) Every input file in exactly one batch, as the log and plans say.
    let log = file_log(&root, QUERY);
    let plans: Vec<OffsetRecord> = offset_records(&root, QUERY);
    let ids: Vec<u64> = log.iter().map(|e| e.0).collect();
    assert_eq!(
        ids,
        (0..FILES).collect::<Vec<_>>(),
        "one file a batch: {log:?}"
    );
    assert_eq!(plans.len(), log.len(), "no plan was purged");
    let mut taken: Vec<String> = log.iter().flat_map(|(_, f)| f.clone()).collect();
    taken.sort();
    let names: Vec<String> = (0..FILES).map(file_name).collect();
    assert_eq!(taken, names, "each input file is taken exactly once");
    let mut end = 0;
    for ((n, files), plan) in log.iter().zip(&plans) {
        assert_eq!(plan.batch_id, *n, "batches are contiguous");
        let SourceOffsets::Files {
            start_seq,
            end_seq,
            files: planned,
            ..
        } = plan.inputs.single().expect("one source")
        else {
            panic!("batch {n} planned another source: {plan:?}");
        };
        assert_eq!(
            (*start_seq, *end_seq),
            (end, end + 1),
            "batch {n}: {plan:?}"
        );
        end = *end_seq;
        let paths: Vec<&String> = planned.iter().map(|f| &f.path).collect();
        assert_eq!(
            paths,
            files.iter().collect::<Vec<_>>(),
            "batch {n}: log and plan differ"
        );
        for f in planned {
            let size = std::fs::metadata(dir.join(&f.path)).unwrap().len();
            assert_eq!(f.size, size, "batch {n} planned {} at another size", f.path);
        }
    }

    // Each batch committed what the oracle computes over its plan's file:
    // a replay read the same input as the plan it replayed.
    let by_batch: BTreeMap<u64, Vec<String>> = committed_batches(&sink, &schema).await;
    assert_eq!(by_batch.len(), plans.len(), "one manifest a batch");
    for plan in &plans {
        let SourceOffsets::Files { files, .. } = plan.inputs.single().expect("one source") else {
            unreachable!("checked above")
        };
        let input = files.iter().map(|f| file_rows(&f.path)).collect();
        let (_, want) = oracle(input).await;
        let got = by_batch
            .get(&plan.batch_id)
            .expect("a manifest of every batch");
        assert!(
            *got == want,
            "batch {} differs from the oracle over {files:?}",
            plan.batch_id
        );
    }

    // Epochs: never decreasing; a batch a driver kill caught in flight was
    // committed by a later driver, from the plan it had.
    let epochs = assert_epochs_non_decreasing(&root, QUERY);
    eprintln!("commit epochs (batch, epoch): {epochs:?}");
    assert_eq!(epochs.len() as u64, FILES);
    let committed: BTreeMap<u64, u64> = commit_epochs(&root, QUERY).into_iter().collect();
    for (n, bytes) in &in_flight {
        let now = std::fs::read(plan_path(&root, *n)).unwrap();
        assert_eq!(&now, bytes, "offsets/{n} changed");
        let plan = &plans[*n as usize];
        assert!(
            committed[n] > plan.epoch,
            "batch {n}, planned under epoch {}, committed under {}",
            plan.epoch,
            committed[n]
        );
    }
    let last = epochs.last().unwrap().1;
    assert!(last >= plans[0].epoch + 2, "two restarts: {epochs:?}");
    eprintln!("took {:?}", started.elapsed());
    // What the executor kill interrupted, as the driver saw it.
    let log = std::fs::read_to_string(driver.log_path()).unwrap();
    for line in log.lines().filter(|l| l.contains("executor lost")) {
        eprintln!("{line}");
    }
}
