//! Chaos on a Kafka query while records keep arriving: a standalone driver
//! is SIGKILLed and restarted twice and an executor once; an etcd-elected
//! leader is SIGKILLed and its standby takes over. In both, the sink then
//! holds every produced record exactly once (the checker reads the sink),
//! and commit epochs never decrease. Replay with `SLUICE_TEST_SEED=N`.

use sluice_common::checkpoint::Log;
use std::time::Duration;

use sluice_tests::ha::{Ha, leader_and_epoch, wait_leader_except};
use sluice_tests::kafka::{self, Broker};
use sluice_tests::{
    Client, Cluster, TTL_MS, Watch, assert_epochs_non_decreasing, assert_exactly_once, test_rng,
};

const TOTAL: u64 = 8000;
const CHUNK: u64 = 250;

/// Produces `0..TOTAL` to the 4 partitions of `topic`, a chunk every
/// 100 ms.
fn producer(broker: &Broker, topic: &'static str) -> tokio::task::JoinHandle<()> {
    kafka::produce_while(broker, topic, 4, TOTAL, CHUNK)
}

/// Waits until the query has read every produced record, then stops it.
async fn read_all_and_stop(client: &mut Client, query: &str) {
    kafka::wait_ends(client, query, TOTAL as i64).await;
    client.stop(query).await.expect("stop");
}

fn spec(broker: &Broker, query: &str, sink: &std::path::Path) -> String {
    kafka::spec(
        query,
        &broker.servers(),
        "chaos",
        sink,
        "max_records_per_partition: 150",
    )
    .replace("interval_ms: 100", "interval_ms: 50")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_killed_twice_and_an_executor_once_while_producing_keeps_exactly_once() {
    let mut rng = test_rng();
    let cluster = Cluster::new("kafka-chaos");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("chaos", 4).await;
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executors = [
        cluster.start_executor(&drivers),
        cluster.start_executor(&drivers),
    ];
    let sink = cluster.sink_path("chaos");
    let mut client = cluster.client(&drivers);
    client
        .submit(&spec(&broker, "chaos", &sink))
        .await
        .expect("submit");
    let producing = producer(&broker, "chaos");

    for k in 1..=2 {
        tokio::time::sleep(rng.millis(300, 900)).await;
        eprintln!("SIGKILL {k}/2 of the driver");
        driver.kill();
        tokio::time::sleep(rng.millis(0, 300)).await;
        driver.restart_ready().await;
        if k == 1 {
            tokio::time::sleep(rng.millis(100, 500)).await;
            eprintln!("SIGKILL of executor-0");
            executors[0].kill();
        }
    }
    producing.await.expect("producer");
    executors[0].restart();
    read_all_and_stop(&mut client, "chaos").await;
    assert_eq!(driver.starts(), 3);
    assert_exactly_once(&sink, TOTAL).await;
    let epochs = assert_epochs_non_decreasing(&cluster.checkpoint_root(), "chaos");
    eprintln!("commit epochs (batch, epoch): {epochs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_failover_with_etcd_keeps_exactly_once() {
    let cluster = Cluster::new("kafka-failover");
    let broker = Broker::start(&cluster).await;
    broker.create_topic("chaos", 4).await;
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let sink = cluster.sink_path("failover");
    let mut client = cluster.client(&ha.list);
    client
        .submit(&spec(&broker, "failover", &sink))
        .await
        .expect("submit");
    let root = cluster.checkpoint_root();
    let mut watch = Watch::query(&root, "failover").with_sink(&sink);
    let producing = producer(&broker, "chaos");
    watch
        .wait_for(Duration::from_secs(30), |r| {
            r.log == Log::Commits.dir() && r.batch >= 3
        })
        .await
        .expect("commits/3");
    let (_, old_epoch) = leader_and_epoch(&mut client).await;
    ha.drivers[1 - ha.leader]
        .wait_armed(Duration::from_secs(10))
        .await;
    eprintln!("SIGKILL of the leader {}", ha.drivers[ha.leader].name());
    ha.drivers[ha.leader].kill();
    let new = wait_leader_except(
        &ha.drivers,
        Some(ha.leader),
        Duration::from_millis(TTL_MS * 10),
    )
    .await;
    let after = watch
        .commit_after_epoch(old_epoch, Duration::from_secs(30))
        .await
        .expect("a commit under the new leader's epoch");
    eprintln!(
        "{} leads; batch {} committed under epoch {} > {old_epoch}",
        ha.drivers[new].name(),
        after.batch,
        after.epoch
    );
    producing.await.expect("producer");
    read_all_and_stop(&mut client, "failover").await;
    assert_exactly_once(&sink, TOTAL).await;
    assert_epochs_non_decreasing(&root, "failover");
    watch.poll();
    watch.assert_commit_epochs_non_decreasing();
}
