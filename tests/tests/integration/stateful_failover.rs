//! Stateful queries through a leader failover with etcd: two drivers, the
//! leader SIGKILLed while a batch is in flight. The standby takes over,
//! re-runs the batch from `offsets/N` against the state version N-1 on
//! storage, and the sinks hold DataFusion's one-piece result: the running
//! aggregate (update mode) and each window once (append mode).

use std::time::Duration;

use sluice_tests::ha::{Ha, wait_batch_in_flight, wait_leader_except};
use sluice_tests::stateful::{assert_pair, submit_pair};
use sluice_tests::{Cluster, READY_TIMEOUT};

const RPS: u64 = 10_000;
const TOTAL: u64 = 60_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_resumes_stateful_queries_from_the_checkpoint() {
    let cluster = Cluster::new("stateful-failover");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let mut client = cluster.client(&ha.list);
    submit_pair(&mut client, &cluster, (RPS, TOTAL), 2).await;
    let root = cluster.checkpoint_root();
    client
        .wait_committed("counts", 4, Duration::from_secs(30))
        .await;
    assert!(
        wait_batch_in_flight(&root, "counts", Duration::from_secs(20)).await,
        "a batch in flight"
    );
    ha.drivers[ha.leader].kill();
    let next = wait_leader_except(&ha.drivers, Some(ha.leader), READY_TIMEOUT).await;
    eprintln!("driver {} took over from driver {}", next, ha.leader);
    for epochs in assert_pair(&mut client, &cluster, (RPS, TOTAL)).await {
        let (first, last) = (epochs[0].1, epochs.last().unwrap().1);
        assert!(
            last > first,
            "committed under the new leader too: {epochs:?}"
        );
    }
}
