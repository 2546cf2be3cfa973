//! Chaos: the leader driver is SIGKILLed while a batch is in flight. Its
//! process is gone, so the standby's stream to it breaks and its port
//! refuses: the standby revokes its lease and must commit the next batch,
//! under a higher epoch, in less than the lease TTL after the kill (printed
//! as `failover_ms`; waiting for the lease would take longer). The new
//! leader counts the takeover as `leader_refused` and its log names the
//! address that refused. The query still finishes exactly-once with
//! commit epochs that never decrease.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 2 executors.

use sluice_common::checkpoint::Log;
use std::time::{Duration, Instant, SystemTime};

use sluice_tests::ha::{leader_and_epoch, ms_between, wait_batch_in_flight, wait_leader_except};
use sluice_tests::{Cluster, TTL_MS, finish_and_check, ha::Ha};

const QUERY: &str = "killed";
const TOTAL: u64 = 12_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_standby_revokes_and_commits_within_the_ttl() {
    let started = Instant::now();
    let cluster = Cluster::new("chaos-leader-killed");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let leader = ha.leader;
    let sink = cluster.sink_path(QUERY);
    let (mut client, mut watch, first) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();
    let (addr, old_epoch) = leader_and_epoch(&mut client).await;
    assert_eq!(addr, ha.drivers[leader].addr(), "the Cluster RPC agrees");
    assert_eq!(
        first.epoch, old_epoch,
        "the leader's epoch is in its commits"
    );

    // The standby holds its stream to the leader (a leader killed in the
    // first moments of its term, before that, is left to the lease).
    ha.drivers[1 - leader]
        .wait_armed(Duration::from_secs(10))
        .await;
    // Kill during a batch: its offsets record is written, its commit not.
    let in_flight = wait_batch_in_flight(&root, QUERY, Duration::from_secs(5)).await;
    let killed_at = SystemTime::now();
    ha.drivers[leader].kill();
    watch.poll();
    let last_old = watch
        .of(Log::Commits.dir())
        .last()
        .map(|r| r.batch)
        .expect("commits seen");
    eprintln!(
        "SIGKILL of the leader {} (epoch {old_epoch}); batch in flight: {in_flight}; \
         last commit before the kill: batch {last_old}",
        ha.drivers[leader].name()
    );

    let bound_ms = TTL_MS as i64;
    let next = watch
        .commit_after_epoch(old_epoch, Duration::from_secs(30))
        .await
        .expect("the standby commits under a higher epoch within 30 s");
    let failover_ms = ms_between(killed_at, next.written);
    eprintln!(
        "failover_ms = {failover_ms} (kill to commits/{} at epoch {}; bound {bound_ms} ms)",
        next.batch, next.epoch
    );
    let new_leader = wait_leader_except(&ha.drivers, Some(leader), Duration::from_secs(10)).await;
    let (addr, new_epoch) = leader_and_epoch(&mut client).await;
    assert_eq!(addr, ha.drivers[new_leader].addr());
    assert_eq!(
        next.epoch, new_epoch,
        "the new leader's epoch is in the commit"
    );
    assert_eq!(
        next.batch,
        last_old + 1,
        "the standby commits the batch after the last one of the old epoch"
    );
    assert!(
        failover_ms < bound_ms,
        "failover took {failover_ms} ms, not less than the TTL ({bound_ms} ms): \
         the standby waited for the lease instead of detecting the dead process"
    );
    let standby = &ha.drivers[new_leader];
    assert_eq!(
        standby.takeovers("leader_refused").await,
        1.0,
        "the new leader counts its takeover as a refused leader"
    );
    assert_eq!(standby.takeovers("lease_expired").await, 0.0);
    let log = std::fs::read_to_string(standby.log_path()).expect("the standby's log");
    let evidence = log
        .lines()
        .find(|l| l.contains("the leader's process is gone"))
        .expect("the standby logs its evidence");
    assert!(
        evidence.contains(ha.drivers[leader].addr()) && evidence.contains("refused_after_ms"),
        "the evidence names the address that refused, and when: {evidence}"
    );
    eprintln!("evidence: {evidence}");

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
    assert!(
        epochs.iter().all(|e| e.1 == old_epoch || e.1 == new_epoch),
        "only the two leaders committed: {epochs:?}"
    );
    eprintln!(
        "{} commits, epochs {old_epoch} -> {new_epoch}; test took {:?}",
        epochs.len(),
        started.elapsed()
    );
}
