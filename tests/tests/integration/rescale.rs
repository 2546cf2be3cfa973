//! Rescaling: a stopped query submitted again with other
//! `state_partitions` runs on from its last committed state, repartitioned
//! (4 → 12 → 3 state partitions across two stops), and its sink holds what
//! DataFusion computes over all of the input in one piece: an aggregation
//! over the rate source, a global aggregate, and a join of two file
//! streams whose buffered rows are matched only after each rescale.

use sluice_common::checkpoint::{Log, STATE_DIR};
use std::path::Path;
use std::time::Duration;

use sluice_tests::inputs::{self, SCHEMA_YAML};
use sluice_tests::oracle::{committed, concat, expected_with, rate_input, rate_start_ms};
use sluice_tests::stateful::{assert_matches, batches, oracle};
use sluice_tests::{
    Client, Cluster, DriverOpts, QueryState, READY_TIMEOUT, Spec, files_under, query_dir,
};
use tonic::Code;

const RPS: u64 = 2_000;
const TOTAL: u64 = 30_000;
const COUNTS: &str =
    "SELECT value % 200 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 200";
const GLOBAL: &str = "SELECT count(*) AS n, sum(value) AS s FROM input";
const JOIN: &str = "SELECT o.id, o.city, p.score FROM o JOIN p ON o.id = p.id \
     AND p.ts BETWEEN o.ts - INTERVAL '5 seconds' AND o.ts + INTERVAL '10 seconds'";
const ROWS: u64 = 200;

fn rate(name: &str, cluster: &Cluster, sql: &str, partitions: u32) -> String {
    Spec::new(name, &cluster.sink_path(name))
        .partitions(4)
        .rows_per_second(RPS)
        .total_rows(TOTAL)
        .max_rows_per_batch(1000)
        .interval_ms(0)
        .sql(sql)
        .with(&format!("state_partitions: {partitions}"))
        .to_yaml()
}

fn join(cluster: &Cluster, partitions: u32) -> String {
    let schema = SCHEMA_YAML.replace("      - ", "        - ");
    let source = |s: &str| {
        format!(
            "    files:\n      path: {}\n      format: jsonl\n      schema:\n{schema}      max_files_per_batch: 1\n      total_files: 2\n",
            cluster.root().join(s).display()
        )
    };
    format!(
        "name: join\nsources:\n  o:\n{}  p:\n{}state_partitions: {partitions}\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {JOIN:?}\n",
        source("o"),
        source("p"),
        cluster.sink_path("join").display()
    )
}

/// Every query's spec with `partitions` state partitions.
fn specs(cluster: &Cluster, partitions: u32) -> Vec<(&'static str, String)> {
    vec![
        ("counts", rate("counts", cluster, COUNTS, partitions)),
        ("global", rate("global", cluster, GLOBAL, partitions)),
        ("join", join(cluster, partitions)),
    ]
}

/// Stops each query once it has committed batch `after + 1` or later,
/// then submits it again with `partitions` state partitions. Returns the
/// last batch each had committed when it stopped.
async fn rescale(
    client: &mut Client,
    cluster: &Cluster,
    partitions: u32,
    after: &[i64],
) -> Vec<i64> {
    let mut stopped_at = Vec::new();
    for ((name, spec), after) in specs(cluster, partitions).into_iter().zip(after) {
        client
            .wait_committed(name, after + 1, Duration::from_secs(60))
            .await;
        client.stop(name).await.expect("stop");
        let status = client
            .wait_state(name, QueryState::Stopped, Duration::from_secs(30))
            .await;
        let last = status.latest_progress.expect("progress").batch_id as i64;
        stopped_at.push(last);
        client
            .submit(&spec)
            .await
            .unwrap_or_else(|e| panic!("{name}: restart with {partitions} refused: {e}"));
    }
    stopped_at
}

fn write(root: &Path, stream: &str, n: u64) {
    let rows = inputs::rows(n, ROWS);
    inputs::write(&root.join(stream), &format!("{n:02}.jsonl"), "jsonl", &rows);
}

/// The directory of `query`'s one state operator.
fn operator_dir(root: &Path, query: &str) -> std::path::PathBuf {
    let state = query_dir(root, query).join(STATE_DIR);
    std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .next()
        .expect("an operator's state")
        .path()
}

/// `query`'s rescale records: (previous partitions, partitions) each.
fn rescales(root: &Path, query: &str) -> Vec<(u64, u64)> {
    rescales_of(root, query, 2)
}

/// `query`'s first `n` rescale records.
fn rescales_of(root: &Path, query: &str, n: u64) -> Vec<(u64, u64)> {
    (1..=n)
        .map(|g| {
            let path = query_dir(root, query).join(Log::Rescales.entry(g));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let r: serde_json::Value = serde_json::from_str(&text).unwrap();
            let n = |f: &str| r[f].as_u64().unwrap_or_else(|| panic!("{f} in {text}"));
            (n("previous_partitions"), n("partitions"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescaled_state_partitions_4_12_3_are_exact() {
    let cluster = Cluster::new("rescale");
    // Retention every 10 batches keeps 2: by batch 20 the last generation
    // stands alone, and the older ones' files go.
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--retain-batches".into(), "2".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let root = cluster.root().to_path_buf();
    for s in ["o", "p"] {
        std::fs::create_dir_all(root.join(s)).unwrap();
    }
    // The orders first: the join buffers them, and their payments come
    // only after a rescale.
    write(&root, "o", 0);
    write(&root, "o", 1);
    for (name, spec) in specs(&cluster, 4) {
        client
            .submit(&spec)
            .await
            .unwrap_or_else(|e| panic!("{name}: submit refused: {e}"));
    }
    let running = client
        .submit(&specs(&cluster, 12)[0].1)
        .await
        .expect_err("a running query is not rescaled");
    assert_eq!(running.code(), Code::FailedPrecondition, "{running:?}");

    let first = rescale(&mut client, &cluster, 12, &[1, 1, 0]).await;
    write(&root, "p", 0);
    // Each query commits a batch with 12 partitions before the next stop.
    rescale(&mut client, &cluster, 3, &first).await;
    write(&root, "p", 1);

    let other_sql = rate("counts", &cluster, GLOBAL, 3);
    let err = client
        .submit(&other_sql)
        .await
        .expect_err("a running query keeps its SQL");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    let ckpt = cluster.checkpoint_root();
    for (name, sql, mode, keys) in [
        ("counts", COUNTS, "update", &["k"][..]),
        ("global", GLOBAL, "update", &[][..]),
    ] {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let input = rate_input(rate_start_ms(&ckpt, name), RPS, TOTAL);
        let want = oracle(sql, input, &[]).await;
        assert_matches(
            name,
            mode,
            &batches(&cluster.sink_path(name)).await,
            keys,
            &want,
        );
        assert_eq!(rescales(&ckpt, name), vec![(4, 12), (12, 3)], "{name}");
        // Generation 2 holds its 3 partitions; retention removed the
        // files of generations 0 and 1 once it stood alone.
        let op = operator_dir(&ckpt, name);
        let partitions = std::fs::read_dir(op.join("g2")).unwrap().count();
        assert_eq!(partitions, 3, "{name}");
        let older: Vec<_> = files_under(&op)
            .into_iter()
            .filter(|f| !f.starts_with(op.join("g2")))
            .collect();
        assert!(
            older.is_empty(),
            "{name}: files of older generations: {older:?}"
        );
    }
    // `sluice state` reads the last generation's 3 partitions: every key.
    let root = ckpt.to_str().unwrap();
    let sql = "SELECT count(*) AS keys FROM state";
    let args = [
        "state",
        "counts",
        "--checkpoint-root",
        root,
        "--json",
        "--sql",
        sql,
    ];
    let out = cluster.cli("127.0.0.1:1", &args).await;
    out.assert_success();
    assert_eq!(out.json()[0]["keys"].as_u64(), Some(200), "{out}");
    let status = client
        .wait_state("join", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "join: {status:#?}");
    let files = |_| concat(&(0..2).map(|n| inputs::rows(n, ROWS)).collect::<Vec<_>>());
    let want = expected_with(JOIN, Vec::new(), &[("o", files(0)), ("p", files(1))]).await;
    let got = committed(&cluster.sink_path("join")).await;
    assert_eq!(got.len(), want.len(), "join: row counts differ");
    assert!(got == want, "join: the sink differs from the oracle");
    for g in 1..=2 {
        let record = query_dir(&ckpt, "join").join(Log::Rescales.entry(g));
        assert!(record.exists(), "{} records the rescale", record.display());
    }
}

/// A stop that comes while a batch is between its sink commit and
/// `commits/N` lets that commit finish: the stopped query can then be
/// rescaled at once, and its sink is still exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_commit_lets_it_finish_and_the_query_rescales() {
    const HELD: &str = "sink-committed";
    let cluster = Cluster::new("rescale-stop");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    driver.failpoint(HELD, true).await;
    client
        .submit(&rate("global", &cluster, GLOBAL, 4))
        .await
        .expect("submit");
    let held = driver
        .wait_failpoint_hit(HELD, Duration::from_secs(60))
        .await;
    client.stop("global").await.expect("stop");
    client
        .wait_state("global", QueryState::Stopped, Duration::from_secs(30))
        .await;
    // The stop waits with the held commit; released, it goes on to
    // `commits/N`.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ckpt = cluster.checkpoint_root();
    let commit = query_dir(&ckpt, "global").join(Log::Commits.entry(held));
    assert!(!commit.exists(), "batch {held} is held before its commit");
    driver.failpoint(HELD, false).await;
    client
        .submit(&rate("global", &cluster, GLOBAL, 12))
        .await
        .expect("the stopped query rescales: its last batch committed");
    assert!(commit.exists(), "{} was written", commit.display());

    let status = client
        .wait_state("global", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let input = rate_input(rate_start_ms(&ckpt, "global"), RPS, TOTAL);
    let want = oracle(GLOBAL, input, &[]).await;
    let got = batches(&cluster.sink_path("global")).await;
    assert_matches("global", "update", &got, &[], &want);
    assert_eq!(rescales_of(&ckpt, "global", 1), vec![(4, 12)]);
}
