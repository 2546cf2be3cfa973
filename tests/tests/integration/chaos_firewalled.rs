//! Chaos: the leader's gRPC port is firewalled, in a network namespace of
//! the test's own: every packet to it is dropped, so connections time out
//! rather than being refused. The standby's stream to the leader goes
//! silent and breaks on its keep-alive; its probes time out. That proves
//! nothing (a partition, a paused process and a firewall look the same),
//! so no early revoke may happen: the leader keeps its lease (etcd is
//! still reachable) and its epoch through the whole outage. Once the rule
//! is removed, the query finishes exactly-once under that one epoch.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 2 executors.

use std::time::{Duration, Instant};

use sluice_tests::ha::{Ha, leader_and_epoch};
use sluice_tests::{Cluster, TTL_MS, finish_and_check, netns};

const QUERY: &str = "firewalled";
const TOTAL: u64 = 12_000;
/// This test's full name in the integration binary, for [`netns::enter`].
const NAME: &str = "chaos_firewalled::firewalled_leader_is_not_revoked";
/// What the standby logs when its probes find the port silent.
const INCONCLUSIVE: &str = "its port did not refuse: leaving the decision to its lease";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firewalled_leader_is_not_revoked() {
    if !netns::enter(NAME, Duration::from_secs(240)) {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::new("chaos-firewalled");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let sink = cluster.sink_path(QUERY);
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();
    let (_, epoch) = leader_and_epoch(&mut client).await;
    let leader = &ha.drivers[ha.leader];
    let standby = &ha.drivers[1 - ha.leader];
    standby.wait_armed(Duration::from_secs(10)).await;

    let port: u16 = leader.addr().rsplit(':').next().unwrap().parse().unwrap();
    netns::drop_port(port);
    let t0 = Instant::now();
    eprintln!("dropping every packet to the leader's port {port} (epoch {epoch})");

    // The stream breaks on its keep-alive (about 2 s), then the probes time out.
    let seen = loop {
        let log = std::fs::read_to_string(standby.log_path()).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.contains(INCONCLUSIVE)) {
            break line.to_string();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the standby's stream to the silent leader never broke"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("after {:?} the standby logged: {seen}", t0.elapsed());

    // Hold the firewall for two more TTLs: the leader keeps leading.
    let hold = t0.elapsed() + Duration::from_millis(2 * TTL_MS);
    while t0.elapsed() < hold {
        assert_eq!(
            leader.metric("sluice_is_leader").await,
            Some(1.0),
            "the leader kept its lease"
        );
        assert_eq!(leader.metric("sluice_epoch").await, Some(epoch as f64));
        assert_eq!(standby.metric("sluice_is_leader").await, Some(0.0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for cause in ["leader_refused", "lease_expired", "resigned"] {
        assert_eq!(standby.takeovers(cause).await, 0.0, "no takeover ({cause})");
    }
    let log = std::fs::read_to_string(standby.log_path()).unwrap_or_default();
    assert!(!log.contains("the leader's process is gone"), "no revoke");
    netns::allow_all();
    eprintln!("firewall removed after {:?}", t0.elapsed());

    let epochs = finish_and_check(
        &mut client,
        &mut watch,
        &root,
        QUERY,
        &sink,
        TOTAL,
        Duration::from_secs(90),
    )
    .await;
    assert!(
        epochs.iter().all(|e| e.1 == epoch),
        "every batch committed under the one leader's epoch {epoch}: {epochs:?}"
    );
    eprintln!(
        "{} commits at epoch {epoch}; test took {:?}",
        epochs.len(),
        started.elapsed()
    );
}
