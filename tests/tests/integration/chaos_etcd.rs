//! Chaos on etcd itself, under a running query on 2 drivers (TTL 2000 ms)
//! and 2 executors:
//!
//! - the only etcd member is SIGKILLed and held down for 4 s: no commit
//!   may be written later than 2/3 of the TTL (+300 ms for a write already
//!   in flight) after the kill; etcd restarts on the same data and ports
//!   and the query finishes exactly-once;
//! - one follower of a 3-member etcd cluster is SIGKILLed: no failover at
//!   all (one epoch in every commit, the same leader driver), and the
//!   query finishes exactly-once.

use sluice_common::checkpoint::Log;
use std::time::{Duration, Instant, SystemTime};

use sluice_tests::etcd::ETCD_READY_TIMEOUT;
use sluice_tests::ha::{Ha, leader_and_epoch, ms_between, ready_drivers};
use sluice_tests::{
    Cluster, QueryState, TTL_MS, assert_epochs_non_decreasing, assert_exactly_once,
    finish_and_check,
};

const TOTAL: u64 = 12_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_no_commit_without_lease_then_finishes() {
    const QUERY: &str = "etcd-down";
    let started = Instant::now();
    let cluster = Cluster::new("chaos-etcd-restart");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();
    let (_, old_epoch) = leader_and_epoch(&mut client).await;

    let etcd = ha.etcd.member(0);
    let down = Duration::from_secs(4);
    let killed_at = SystemTime::now();
    etcd.kill();
    let t0 = Instant::now();
    while t0.elapsed() < down {
        watch.poll();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    watch.poll();
    let limit_ms = (TTL_MS * 2 / 3 + 300) as i64;
    let commits = watch.of(Log::Commits.dir());
    let last = commits.last().expect("commits seen");
    let last_ms = ms_between(killed_at, last.written);
    eprintln!(
        "etcd SIGKILLed for {down:?}: the last commit (commits/{} at epoch {}) was written \
         {last_ms} ms after the kill (limit {limit_ms} ms)",
        last.batch, last.epoch
    );
    let late: Vec<String> = commits
        .iter()
        .filter(|r| ms_between(killed_at, r.written) > limit_ms)
        .map(|r| {
            format!(
                "commits/{} epoch {} at +{} ms",
                r.batch,
                r.epoch,
                ms_between(killed_at, r.written)
            )
        })
        .collect();
    assert!(
        late.is_empty(),
        "commits written while no driver could hold the lease: {late:?}"
    );
    let ready = ready_drivers(&ha.drivers).await;
    eprintln!("drivers ready with etcd down: {ready:?}");

    let restarted_at = SystemTime::now();
    etcd.restart();
    etcd.wait_healthy(ETCD_READY_TIMEOUT).await;
    let next = watch
        .wait_for(Duration::from_secs(30), |r| r.log == Log::Commits.dir())
        .await
        .expect("a commit within 30 s of the etcd restart");
    eprintln!(
        "etcd restart to the next commit (commits/{} at epoch {}): {} ms",
        next.batch,
        next.epoch,
        ms_between(restarted_at, next.written)
    );
    assert!(next.epoch >= old_epoch);

    let epochs = finish_and_check(
        &mut client,
        &mut watch,
        &root,
        QUERY,
        &cluster.sink_path(QUERY),
        TOTAL,
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "{} commits, epochs {old_epoch} -> {}; test took {:?}",
        epochs.len(),
        epochs.last().map_or(0, |e| e.1),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_member_lost_no_failover() {
    const QUERY: &str = "member-lost";
    let started = Instant::now();
    let cluster = Cluster::new("chaos-etcd-member");
    let ha = Ha::start(&cluster, 3, 2, 2).await;
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();
    let (leader_addr, epoch) = leader_and_epoch(&mut client).await;
    assert_eq!(leader_addr, ha.drivers[ha.leader].addr());

    // A follower, not the raft leader: losing the raft leader forces an
    // etcd election (election timeout 1 s, plus the campaign), during which
    // no lease keep-alive can succeed, and that may legitimately exceed
    // the driver's 2/3-TTL renewal window (1.33 s) and cause a failover.
    // A follower's loss keeps the quorum and the raft leader, so the lease
    // must hold and no failover is acceptable.
    let raft_leader = ha.etcd.raft_leader(Duration::from_secs(10)).await;
    let victim = (0..3).find(|&i| i != raft_leader).expect("a follower");
    let member = ha.etcd.member(victim);
    eprintln!(
        "SIGKILL of etcd follower {} (the raft leader is {})",
        member.name(),
        ha.etcd.member(raft_leader).name()
    );
    member.kill();
    let before = watch.of(Log::Commits.dir()).len();
    // Longer than the TTL: a lost lease would have shown by then.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(TTL_MS * 2) {
        for r in watch.poll() {
            assert_eq!(r.epoch, epoch, "a failover after the member loss: {r:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = watch.of(Log::Commits.dir()).len();
    eprintln!(
        "{} commits in the {:?} after the member loss",
        after - before,
        t0.elapsed()
    );
    assert!(after > before, "the query kept committing");

    client
        .wait_state(QUERY, QueryState::Finished, Duration::from_secs(60))
        .await;
    assert_exactly_once(&cluster.sink_path(QUERY), TOTAL).await;
    let epochs = assert_epochs_non_decreasing(&root, QUERY);
    let other: Vec<_> = epochs.iter().filter(|e| e.1 != epoch).collect();
    assert!(
        other.is_empty(),
        "every commit has epoch {epoch}; these do not: {other:?}"
    );
    let (addr, now) = leader_and_epoch(&mut client).await;
    assert_eq!(
        (addr.as_str(), now),
        (leader_addr.as_str(), epoch),
        "the leader changed"
    );
    assert_eq!(ready_drivers(&ha.drivers).await, vec![ha.leader]);
    eprintln!(
        "{} commits, all at epoch {epoch}; test took {:?}",
        epochs.len(),
        started.elapsed()
    );
}
