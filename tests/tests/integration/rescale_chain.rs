//! Rescaling again and again with no batch between: a query stopped and
//! submitted with `state_partitions` 4 → 1 → 64 → 3 → 64 → 2 → 5, its
//! input idle meanwhile, so that every restart begins a state generation
//! from the same committed batch. The next batch rebuilds the 5 new
//! partitions from the 4 of the generation that committed that batch, in
//! one step: each of its reduce tasks reads those 4 partitions (its
//! progress counts them), none of the generations in between gets a file,
//! and the output is what DataFusion computes over all the input.

use sluice_common::checkpoint::{Log, STATE_DIR};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::inputs;
use sluice_tests::stateful::{assert_matches, batches, oracle};
use sluice_tests::{Client, Cluster, QueryState, files_under, log_records, query_dir};

const SQL: &str = "SELECT city, count(*) AS n, sum(id) AS s FROM input GROUP BY city";
const ROWS: u64 = 100;
const CHAIN: [u32; 6] = [1, 64, 3, 64, 2, 5];

fn spec(cluster: &Cluster, partitions: u32) -> String {
    let mut spec = inputs::spec(
        "chain",
        &cluster.root().join("in"),
        "jsonl",
        &cluster.sink_path("chain"),
        SQL,
        2,
    );
    spec.push_str(&format!("state_partitions: {partitions}\n"));
    spec
}

fn write(root: &Path, n: u64) {
    let rows = inputs::rows(n, ROWS);
    inputs::write(&root.join("in"), &format!("{n:02}.jsonl"), "jsonl", &rows);
}

async fn stop(client: &mut Client) {
    client.stop("chain").await.expect("stop");
    client
        .wait_state("chain", QueryState::Stopped, Duration::from_secs(30))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_rescales_without_a_batch_between_rebuilds_once_from_the_state() {
    let cluster = Cluster::new("rescale-chain");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let root = cluster.root().to_path_buf();
    std::fs::create_dir_all(root.join("in")).unwrap();
    write(&root, 0);
    client.submit(&spec(&cluster, 4)).await.expect("submitted");
    client
        .wait_committed("chain", 0, Duration::from_secs(60))
        .await;
    // No new file: no batch runs between the restarts.
    for partitions in CHAIN {
        stop(&mut client).await;
        client
            .submit(&spec(&cluster, partitions))
            .await
            .unwrap_or_else(|e| panic!("restart with {partitions} refused: {e}"));
    }
    let ckpt = cluster.checkpoint_root();
    let commits = log_records::<serde_json::Value>(&ckpt, "chain", Log::Commits);
    assert_eq!(
        commits.len(),
        1,
        "only batch 0 committed before the last restart"
    );

    let started = Instant::now();
    write(&root, 1);
    let status = client
        .wait_state("chain", QueryState::Finished, Duration::from_secs(600))
        .await;
    let took = started.elapsed();
    assert!(status.error.is_empty(), "{status:#?}");
    let progress = log_records::<serde_json::Value>(&ckpt, "chain", Log::Progress);
    let (_, batch1) = progress.iter().find(|(n, _)| *n == 1).expect("batch 1");
    eprintln!("batch 1 took {took:?} from its file to FINISHED; progress: {batch1}");

    let rows = (0..2).map(|n| inputs::rows(n, ROWS)).collect();
    let want = oracle(SQL, rows, &[]).await;
    let got = batches(&cluster.sink_path("chain")).await;
    assert_matches("chain", "update", &got, &["city"], &want);

    // No generation between the first and the last got a file.
    let op = std::fs::read_dir(query_dir(&ckpt, "chain").join(STATE_DIR))
        .unwrap()
        .flatten()
        .next()
        .expect("an operator's state")
        .path();
    let between: Vec<usize> = (1..CHAIN.len())
        .map(|g| files_under(&op.join(format!("g{g}"))).len())
        .collect();
    eprintln!("files of generations 1 to 5: {between:?}");
    assert!(
        between.iter().all(|&n| n == 0),
        "generations that ran no batch have files: {between:?}"
    );
    // Each of the 5 new partitions read the 4 partitions of generation 0.
    let rebuild = &batch1["state_rebuild"];
    assert_eq!(rebuild["partitions"].as_u64(), Some(5), "{batch1}");
    assert_eq!(rebuild["partitions_read"].as_u64(), Some(5 * 4), "{batch1}");
    assert_eq!(
        rebuild["rows"].as_u64(),
        Some(6),
        "the 6 cities, null included"
    );
    assert!(
        took < Duration::from_secs(15),
        "the batch after the rescales took {took:?}"
    );
}
