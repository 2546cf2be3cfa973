//! Chaos: planned handover. The leader driver gets SIGTERM; it resigns, so
//! the standby must commit within 1 s of the signal (printed as
//! `handover_ms`), and the old leader exits cleanly within a few seconds.
//! Done twice (A → B, then B → the restarted A); the query finishes
//! exactly-once with commit epochs that never decrease. Each new leader
//! counts its takeover as `resigned`: the old leader announced the resign
//! on the standby's stream before it reached etcd.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 2 executors.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant, SystemTime};

use sluice_tests::ha::{Ha, leader_and_epoch, ms_between, wait_leader_except};
use sluice_tests::{Client, Cluster, finish_and_check};

const QUERY: &str = "handover";
const TOTAL: u64 = 12_000;
const BOUND_MS: i64 = 1000;

/// Waits until the leader lists `addr` among its standbys.
async fn wait_standby(client: &mut Client, addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(info) = client.cluster_info().await
            && info.standbys.iter().any(|s| s == addr)
        {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} is no standby after 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_over_within_1s() {
    let started = Instant::now();
    let cluster = Cluster::new("chaos-handover");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let sink = cluster.sink_path(QUERY);
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();

    let mut leader = ha.leader;
    let mut figures = Vec::new();
    for round in 1..=2 {
        let (addr, old_epoch) = leader_and_epoch(&mut client).await;
        assert_eq!(addr, ha.drivers[leader].addr(), "the Cluster RPC agrees");
        let old = &ha.drivers[leader];
        // The resign is announced on the standby's stream: wait for it (a
        // term only a few batches old may not be watched yet).
        ha.drivers[1 - leader]
            .wait_armed(Duration::from_secs(10))
            .await;
        let termed_at = SystemTime::now();
        old.term();
        let next = watch
            .commit_after_epoch(old_epoch, Duration::from_secs(30))
            .await
            .expect("the standby commits under a higher epoch within 30 s");
        let handover_ms = ms_between(termed_at, next.written);
        eprintln!(
            "round {round}: handover_ms = {handover_ms} (SIGTERM of {} at epoch {old_epoch} \
             to commits/{} at epoch {}; bound {BOUND_MS} ms)",
            old.name(),
            next.batch,
            next.epoch
        );
        figures.push(handover_ms);
        let status = old
            .wait_exit(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{} still runs 10 s after SIGTERM", old.name()));
        eprintln!(
            "round {round}: {} exited with {status} {:?} after SIGTERM",
            old.name(),
            termed_at.elapsed().unwrap_or_default()
        );
        assert!(
            status.success() || status.signal() == Some(15),
            "{} exited uncleanly after SIGTERM: {status}",
            old.name()
        );
        assert!(
            handover_ms <= BOUND_MS,
            "round {round}: handover took {handover_ms} ms, more than {BOUND_MS} ms"
        );
        let new_leader =
            wait_leader_except(&ha.drivers, Some(leader), Duration::from_secs(10)).await;
        let (_, new_epoch) = leader_and_epoch(&mut client).await;
        assert_eq!(
            next.epoch, new_epoch,
            "the new leader's epoch is in the commit"
        );
        // The leader announced its resign on the standby's stream.
        let counted = std::time::Instant::now();
        let taker = &ha.drivers[new_leader];
        while taker.takeovers("resigned").await < 1.0 {
            assert!(
                counted.elapsed() < Duration::from_secs(5),
                "round {round}: the takeover is counted as a resign"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for cause in ["leader_refused", "lease_expired"] {
            assert_eq!(taker.takeovers(cause).await, 0.0, "round {round}: {cause}");
        }
        // The old leader comes back as a standby for the next round.
        old.restart();
        leader = new_leader;
        wait_standby(&mut client, old.addr()).await;
    }
    eprintln!("handover_ms per round: {figures:?}");

    let epochs = finish_and_check(
        &mut client,
        &mut watch,
        &root,
        QUERY,
        &sink,
        TOTAL,
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "{} commits; test took {:?}",
        epochs.len(),
        started.elapsed()
    );
}
