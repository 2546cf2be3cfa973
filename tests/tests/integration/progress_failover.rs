//! Progress history across a failover: after the leader is SIGKILLed,
//! `sluice progress --json` (answered by the new leader) returns every
//! batch a client saw before the kill, with the same figures, followed by
//! the batches the new leader committed. The new leader's `/metrics` counts
//! the election it won and the takeover of a running query.
//!
//! Setup: one etcd member, 2 drivers (TTL 2000 ms), 1 executor.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_tests::Cluster;
use sluice_tests::ha::{Ha, leader_and_epoch, wait_leader_except};

const QUERY: &str = "history";
const TOTAL: u64 = 12_000;

/// `sluice progress QUERY --json`, by batch id.
async fn progress(cluster: &Cluster, drivers: &str) -> BTreeMap<u64, Value> {
    let out = cluster.cli(drivers, &["progress", QUERY, "--json"]).await;
    out.assert_success();
    out.stdout
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line: {e}: {line}"));
            let batch = v["batch_id"].as_u64().expect("batch_id");
            (batch, v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_history_survives_a_leader_kill() {
    let cluster = Cluster::new("progress-failover");
    let ha = Ha::start(&cluster, 1, 2, 1).await;
    let (mut client, mut watch, _) = ha.run_query(&cluster, QUERY, TOTAL).await;
    let (_, old_epoch) = leader_and_epoch(&mut client).await;

    let before = progress(&cluster, &ha.list).await;
    let ids: Vec<u64> = before.keys().copied().collect();
    assert!(ids.len() >= 4, "commits/3 was seen: {ids:?}");
    assert_eq!(
        ids,
        (0..ids.len() as u64).collect::<Vec<_>>(),
        "one record per batch from 0 on"
    );
    assert!(
        before.values().all(|p| p["epoch"] == old_epoch),
        "{before:#?}"
    );
    assert!(
        before
            .values()
            .any(|p| p["num_input_rows"].as_u64() > Some(0)),
        "real figures: {before:#?}"
    );

    ha.drivers[ha.leader].kill();
    let next = watch
        .commit_after_epoch(old_epoch, Duration::from_secs(30))
        .await
        .expect("the standby commits under a higher epoch");
    eprintln!(
        "the new leader committed batch {} at epoch {}",
        next.batch, next.epoch
    );

    // The new leader publishes batch `next` once its progress is stored.
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let after = progress(&cluster, &ha.list).await;
        if after.contains_key(&next.batch) {
            break after;
        }
        assert!(
            Instant::now() < deadline,
            "batch {} never showed in the progress: {:?}",
            next.batch,
            after.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (batch, seen) in &before {
        assert_eq!(
            after.get(batch),
            Some(seen),
            "batch {batch}: the new leader serves what the old one did"
        );
    }
    let ids: Vec<u64> = after.keys().copied().collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");
    assert_eq!(after[&next.batch]["epoch"], next.epoch, "{after:#?}");
    // Between the last batch seen before the kill and the new leader's
    // first, at most one batch is missing: one whose driver was killed
    // after its commit and before its progress record.
    let last_before = *before.keys().last().unwrap();
    let gap: Vec<u64> = (last_before + 1..next.batch)
        .filter(|b| !after.contains_key(b))
        .collect();
    assert!(gap.len() <= 1, "missing batches {gap:?} in {ids:?}");

    let new_leader =
        wait_leader_except(&ha.drivers, Some(ha.leader), Duration::from_secs(10)).await;
    let leader = &ha.drivers[new_leader];
    let metric = |name: &'static str| async move {
        leader
            .metric(name)
            .await
            .unwrap_or_else(|| panic!("{name} is exported"))
    };
    assert_eq!(metric("sluice_leader_elections_won_total").await, 1.0);
    assert_eq!(metric("sluice_failovers_total").await, 1.0);
    assert_eq!(metric("sluice_is_leader").await, 1.0);
    let lease_age = metric("sluice_leader_lease_age_seconds").await;
    assert!(
        lease_age > 0.0 && lease_age < 2.0,
        "renewed within the TTL: {lease_age}"
    );
}
