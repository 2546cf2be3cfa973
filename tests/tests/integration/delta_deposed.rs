//! Two drivers and one Delta table: the leader holds a batch after its
//! data files are checked and before its table commit, and is SIGSTOPped
//! until the standby has taken over and committed that batch. Then it is
//! SIGCONTed and its batch released: whatever it does, the table's log
//! holds each batch once, in order, and the readers read every row once.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 2 executors.

use std::time::Duration;

use sluice_tests::ha::{Ha, leader_and_epoch, wait_committed_past};
use sluice_tests::lake::{delta_txns, oracle_rows, read_delta};
use sluice_tests::oracle::{expected_batches_with, rate_input, rate_start_ms};
use sluice_tests::{Cluster, QueryState, TTL_MS};

const TOTAL: u64 = 4000;
const RATE: u64 = 1000;
const SQL: &str = "SELECT value, timestamp_ms AS ts FROM input";
const POINT: &str = "delta-prepared";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_driver_never_commits_a_batch_again() {
    let cluster = Cluster::new("delta-deposed");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let old = &ha.drivers[ha.leader];
    let table = cluster.root().join("t");
    let spec = format!(
        "name: deposed\n\
         source: {{rate: {{rows_per_second: {RATE}, partitions: 2, total_rows: {TOTAL}}}}}\n\
         trigger: {{interval_ms: 50}}\n\
         sql: \"{SQL}\"\n\
         sink: {{delta: {{path: {}}}}}\n",
        table.display()
    );
    let mut client = cluster.client(&ha.list);
    let id = client.submit(&spec).await.expect("submit").id;
    client
        .wait_committed("deposed", 2, Duration::from_secs(30))
        .await;
    let (_, old_epoch) = leader_and_epoch(&mut client).await;
    old.failpoint(POINT, true).await;
    let held = old.wait_failpoint_hit(POINT, Duration::from_secs(30)).await;
    old.pause();
    eprintln!(
        "batch {held} held before its table commit; the leader (epoch {old_epoch}) is paused"
    );
    // The standby takes over once the lease expires, and commits past the
    // held batch (read from the checkpoint: the paused leader still holds
    // its port, so a client may wait on it).
    let root = cluster.checkpoint_root();
    wait_committed_past(&root, "deposed", held, Duration::from_millis(TTL_MS * 10)).await;
    old.resume();
    // Released, the old leader's batch goes on to its table commit.
    old.failpoint(POINT, false).await;
    client
        .wait_state("deposed", QueryState::Finished, Duration::from_secs(90))
        .await;
    // Time for the old leader to do whatever it would.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (log, compactions) = delta_txns(&table, &id);
    assert_eq!(compactions, 0);
    let batches: Vec<u64> = log.iter().map(|(_, b)| *b).collect();
    assert!(
        batches.first() == Some(&0) && batches.windows(2).all(|w| w[1] == w[0] + 1),
        "each batch is committed once, in order: {log:?}"
    );
    assert!(batches.contains(&held));
    let input = rate_input(
        rate_start_ms(&cluster.checkpoint_root(), "deposed"),
        RATE,
        TOTAL,
    );
    let want = oracle_rows(&expected_batches_with(SQL, input, &[]).await);
    let read = read_delta(&table, &id);
    read.assert_rows(&want);
}
