//! Chaos: the leader driver is SIGSTOPped for TTL + 2 s (and until the
//! standby has committed), so that its lease expires and the standby takes
//! over, then SIGCONTed. From the SIGCONT on, no new file under
//! `offsets/`, `commits/` or the sink's manifests may carry the old epoch,
//! and the old leader's log shows no commit. The query finishes
//! exactly-once with commit epochs that never decrease.
//!
//! A paused process still holds its port (the kernel accepts connections
//! into its backlog) and its streams stay open: the standby must not revoke
//! its lease early. The takeover waits for the lease (at least 2/3 of the
//! TTL after the SIGSTOP, when the leader's last renewal could have been)
//! and is counted as `lease_expired`.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 2 executors.

use std::time::{Duration, Instant, SystemTime};

use sluice_tests::ha::{Ha, leader_and_epoch, ms_between, ready_drivers};
use sluice_tests::{Cluster, TTL_MS, finish_and_check};

const QUERY: &str = "paused";
const TOTAL: u64 = 14_000;
/// How long the old leader is watched after its SIGCONT.
const OBSERVE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_is_fenced_after_sigcont() {
    let started = Instant::now();
    let cluster = Cluster::new("chaos-paused-leader");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let old = &ha.drivers[ha.leader];
    let sink = cluster.sink_path(QUERY);
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let root = cluster.checkpoint_root();
    let (addr, old_epoch) = leader_and_epoch(&mut client).await;
    assert_eq!(addr, old.addr(), "the Cluster RPC agrees");

    // The standby's stream to the leader is open, and must not lead to a
    // revoke while the leader is paused.
    ha.drivers[1 - ha.leader]
        .wait_armed(Duration::from_secs(10))
        .await;
    let pause = Duration::from_millis(TTL_MS + 2000);
    let paused_at = SystemTime::now();
    let t0 = Instant::now();
    old.pause();
    eprintln!(
        "SIGSTOP of the leader {} (epoch {old_epoch}) for {pause:?}",
        old.name()
    );
    // Paused for TTL + 2 s at least, and until the standby has committed.
    let takeover = watch
        .commit_after_epoch(old_epoch, Duration::from_secs(20))
        .await
        .expect("the standby commits within 20 s while the old leader is paused");
    eprintln!(
        "takeover_ms = {} (SIGSTOP to commits/{} at epoch {})",
        ms_between(paused_at, takeover.written),
        takeover.batch,
        takeover.epoch
    );
    let takeover_ms = ms_between(paused_at, takeover.written);
    assert!(
        takeover_ms >= (TTL_MS * 2 / 3) as i64,
        "the standby took over {takeover_ms} ms after the SIGSTOP, before the lease could expire"
    );
    tokio::time::sleep(pause.saturating_sub(t0.elapsed())).await;
    eprintln!("SIGCONT after {:?}", t0.elapsed());

    // Snapshot what exists at SIGCONT time, and where the old log ends.
    watch.poll();
    let log_so_far = std::fs::read(old.log_path()).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&log_so_far).contains("batch committed"),
        "the leader logs each commit (at DEBUG), which the check below reads"
    );
    let log_before = log_so_far.len();
    let resumed_at = SystemTime::now();
    old.resume();
    let before = watch.records.len();
    let deadline = Instant::now() + OBSERVE;
    while Instant::now() < deadline {
        for r in watch.poll() {
            assert!(
                r.epoch > old_epoch,
                "{} ms after SIGCONT a file carries the old epoch {old_epoch}: {r:?}",
                ms_between(resumed_at, r.written)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new: Vec<String> = watch.records[before..]
        .iter()
        .map(|r| format!("{}/{}@{}", r.log, r.batch, r.epoch))
        .collect();
    eprintln!(
        "{} new files in the {OBSERVE:?} after SIGCONT, none of epoch {old_epoch}; last: {:?}",
        new.len(),
        new.last()
    );
    assert!(!new.is_empty(), "the new leader kept committing");

    let log = std::fs::read(old.log_path()).unwrap_or_default();
    let resumed_log = String::from_utf8_lossy(&log[log_before.min(log.len())..]).into_owned();
    let committed: Vec<&str> = resumed_log
        .lines()
        .filter(|l| l.contains("batch committed"))
        .collect();
    assert!(
        committed.is_empty(),
        "the old leader committed after SIGCONT: {committed:#?}"
    );
    assert!(old.is_running(), "the old leader survives as a standby");
    let ready = ready_drivers(&ha.drivers).await;
    assert!(
        !ready.contains(&ha.leader) && ready.len() == 1,
        "only the new leader is ready: {ready:?}"
    );
    let (addr, new_epoch) = leader_and_epoch(&mut client).await;
    assert_ne!(addr, old.addr(), "the leadership moved");
    assert!(new_epoch > old_epoch);
    let new_leader = &ha.drivers[ready[0]];
    assert_eq!(new_leader.takeovers("lease_expired").await, 1.0);
    for d in &ha.drivers {
        assert_eq!(d.takeovers("leader_refused").await, 0.0, "no early revoke");
        let log = std::fs::read_to_string(d.log_path()).unwrap_or_default();
        assert!(
            !log.contains("the leader's process is gone"),
            "{} revoked the lease of a paused leader",
            d.name()
        );
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
    eprintln!(
        "{} commits, epochs {old_epoch} -> {new_epoch}; test took {:?}",
        epochs.len(),
        started.elapsed()
    );
}
