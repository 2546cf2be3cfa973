//! Chaos: a standby wrongly judges a live leader dead and revokes its lease
//! (the drivers' failpoint `revoke-live-leader`: a standby that has it armed
//! revokes the leader's lease as if its port had refused). For a
//! moment two drivers may lead: the old one until its next renewal finds
//! the lease gone. Three rounds, each against the leader of the moment.
//! The old leader must live on as a standby, and the query must finish
//! exactly-once (the checker reads the sink) with commit epochs that never
//! decrease.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 2 executors.

use std::time::{Duration, Instant, SystemTime};

use sluice_tests::ha::{Ha, leader_and_epoch, ms_between, wait_leader_except};

use sluice_tests::{Cluster, Driver, finish_and_check};

const QUERY: &str = "wrong-revoke";
const TOTAL: u64 = 14_000;
const ROUNDS: usize = 3;
const POINT: &str = "revoke-live-leader";

/// Each driver's hits of the failpoint so far.
async fn hits(drivers: &[Driver]) -> Vec<usize> {
    let mut hits = Vec::new();
    for d in drivers {
        hits.push(d.failpoint_hits(POINT).await.len());
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrongly_revoked_live_leader_cannot_change_the_output() {
    let started = Instant::now();
    let cluster = Cluster::new("chaos-wrong-revoke");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let sink = cluster.sink_path(QUERY);
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();
    let (_, mut epoch) = leader_and_epoch(&mut client).await;
    let mut leader = ha.leader;

    for round in 1..=ROUNDS {
        let at = SystemTime::now();
        let before = hits(&ha.drivers).await;
        for (i, d) in ha.drivers.iter().enumerate() {
            if i != leader {
                d.failpoint(POINT, true).await;
            }
        }
        let next = watch
            .commit_after_epoch(epoch, Duration::from_secs(20))
            .await
            .expect("a commit of a newer epoch within 20 s");
        let new_leader =
            wait_leader_except(&ha.drivers, Some(leader), Duration::from_secs(10)).await;
        let after = hits(&ha.drivers).await;
        let fired: Vec<usize> = (0..after.len())
            .filter(|&i| after[i] != before[i])
            .collect();
        assert!(
            matches!(fired.as_slice(), [i] if after[*i] == before[*i] + 1),
            "one standby fired the failpoint once: hits {before:?}, then {after:?}"
        );
        for d in &ha.drivers {
            assert!(
                !d.failpoint_status(POINT).await.armed,
                "the firing disarmed the failpoint ({})",
                d.name()
            );
        }
        assert!(
            ha.drivers[leader].is_running(),
            "the revoked leader lives on, as a standby"
        );
        eprintln!(
            "round {round}: revoked the live leader {} (epoch {epoch}); {} committed batch {} \
             at epoch {} {} ms later",
            ha.drivers[leader].name(),
            ha.drivers[new_leader].name(),
            next.batch,
            next.epoch,
            ms_between(at, next.written)
        );
        assert!(next.epoch > epoch);
        (leader, epoch) = (new_leader, next.epoch);
        // Let the new term commit a few batches before the next round.
        tokio::time::sleep(Duration::from_millis(800)).await;
    }

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
    let hooks: usize = ha
        .drivers
        .iter()
        .map(|d| {
            let log = std::fs::read_to_string(d.log_path()).unwrap_or_default();
            log.matches("test hook: revoking the lease of a live leader")
                .count()
        })
        .sum();
    assert_eq!(hooks, ROUNDS, "one revoke per round, by a standby");
    for d in &ha.drivers {
        assert!(d.is_running(), "{} still runs", d.name());
    }
    let mut distinct: Vec<u64> = epochs.iter().map(|e| e.1).collect();
    distinct.dedup();
    eprintln!(
        "{} commits, epochs {distinct:?}; test took {:?}",
        epochs.len(),
        started.elapsed()
    );
}
