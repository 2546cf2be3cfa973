//! Chaos: a seeded random schedule of SIGKILL, SIGTERM and SIGSTOP/SIGCONT
//! against 2–3 drivers (TTL 2000 ms) and 2–4 executors on one etcd, and of
//! wrong revokes (a standby revokes the lease of a live leader, through the
//! drivers' failpoint `revoke-live-leader`), under
//! a bounded rate query sized to last the whole run. Each victim is
//! restarted (or resumed) after a random delay; at least one driver and
//! one executor stay up, except for a rare full outage of one kind. At the
//! end everything is brought back, the query must finish, the sink must be
//! exactly-once and the commit epochs must never decrease.
//!
//! `SLUICE_CHAOS_SECONDS` (default 60) sets the length of the schedule,
//! `SLUICE_CHAOS_SEED` replays a seed (the schedule is drawn from the seed;
//! its timing relative to the cluster is only as exact as the clock).

use sluice_common::checkpoint::Log;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_tests::etcd::EtcdCluster;
use sluice_tests::ha::{driver_list, ready_drivers};
use sluice_tests::seed::seed_from;
use sluice_tests::{
    Cluster, Driver, DriverOpts, OnPanic, Process, Rng, Spec, TTL_MS, Watch, finish_and_check,
};

const QUERY: &str = "random";
const SEED_VAR: &str = "SLUICE_CHAOS_SEED";
const RATE: u64 = 500;
const REVOKE: &str = "revoke-live-leader";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Term,
    Pause,
    /// A standby revokes the live leader's lease (no node goes down).
    WrongRevoke,
}

/// One driver or executor under chaos.
struct Node<'a> {
    process: &'a Process,
    driver: bool,
    /// Set while the node is down: the fault and when it comes back.
    down: Option<(Fault, Instant)>,
}

impl Node<'_> {
    fn kind(&self) -> &'static str {
        if self.driver { "driver" } else { "executor" }
    }

    fn bring_back(&mut self, log: &mut impl FnMut(String)) {
        let Some((fault, _)) = self.down.take() else {
            return;
        };
        let name = self.process.name();
        if fault == Fault::Pause {
            self.process.resume();
            log(format!("SIGCONT {name}"));
        } else {
            let status = self.process.exit_status().map(|s| s.to_string());
            self.process.restart();
            let status = status.as_deref().unwrap_or("still running, killed");
            log(format!("restart {name} (after {fault:?}; {status})"));
        }
    }
}

/// Arms the failpoint `revoke-live-leader` on the first driver that is
/// `up`, answers and does not lead, unless one that is up has it armed
/// still (it fires once that driver watches a leader). The driver armed.
async fn arm_wrong_revoke(drivers: &[Driver], up: &[bool]) -> Option<usize> {
    let leader = match ready_drivers(drivers).await.as_slice() {
        [one] => Some(*one),
        _ => None,
    };
    let mut standbys = Vec::new();
    for (i, d) in drivers.iter().enumerate().filter(|(i, _)| up[*i]) {
        match d.try_failpoint_status(REVOKE).await {
            Ok(s) if s.armed => return None,
            Ok(_) if Some(i) != leader => standbys.push(i),
            _ => {}
        }
    }
    let standby = *standbys.first()?;
    drivers[standby].try_failpoint(REVOKE, true).await.ok()?;
    Some(standby)
}

fn chaos_seconds() -> u64 {
    std::env::var("SLUICE_CHAOS_SECONDS").map_or(60, |s| {
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("SLUICE_CHAOS_SECONDS={s:?} is not a number"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_schedule_keeps_exactly_once() {
    let seed = seed_from(SEED_VAR);
    let _replay = OnPanic(format!(
        "chaos seed = {seed} (replay with {SEED_VAR}={seed})"
    ));
    let mut rng = Rng::new(seed);
    let seconds = chaos_seconds();
    let (n_drivers, n_executors) = (rng.between(2, 3), rng.between(2, 4));
    eprintln!("chaos: {seconds} s, {n_drivers} drivers, {n_executors} executors, seed {seed}");

    let started = Instant::now();
    let cluster = Cluster::new("chaos-random");
    let etcd = EtcdCluster::start_healthy(&cluster, 1).await;
    let drivers: Vec<_> = (0..n_drivers)
        .map(|_| {
            cluster.start_driver_with(DriverOpts {
                etcd: etcd.endpoints(),
                lease_ttl_ms: Some(TTL_MS),
                // Keep every record, so the epoch order covers the whole run.
                extra_args: vec!["--retain-batches".into(), "1000000".into()],
                ..DriverOpts::default()
            })
        })
        .collect();
    sluice_tests::ha::wait_leader(&drivers, sluice_tests::READY_TIMEOUT).await;
    let list = driver_list(&drivers);
    let executors: Vec<_> = (0..n_executors)
        .map(|_| cluster.start_executor(&list))
        .collect();

    let total = RATE * seconds;
    let sink = cluster.sink_path(QUERY);
    let spec = Spec::new(QUERY, &sink)
        .partitions(4)
        .rows_per_second(RATE)
        .total_rows(total)
        .interval_ms(100);
    let mut client = cluster.client(&list);
    client.submit(&spec.to_yaml()).await.expect("submit");
    let root = cluster.checkpoint_root();
    let mut watch = Watch::query(&root, QUERY);

    let mut nodes: Vec<Node> = drivers
        .iter()
        .map(|d| (d.process(), true))
        .chain(executors.iter().map(|e| (e.process(), false)))
        .map(|(process, driver)| Node {
            process,
            driver,
            down: None,
        })
        .collect();
    let t0 = Instant::now();
    let mut log = |line: String| eprintln!("[{:>6} ms] {line}", t0.elapsed().as_millis());
    let mut counts: BTreeMap<(&str, Fault), u32> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let end = t0 + Duration::from_secs(seconds);
    let mut next_fault = t0 + rng.millis(500, 2500);
    while Instant::now() < end {
        let now = Instant::now();
        for node in nodes.iter_mut() {
            if node.down.is_some_and(|(_, at)| at <= now) {
                node.bring_back(&mut log);
            } else if node.down.is_none() && !node.process.is_running() {
                let what = format!(
                    "{} exited by itself: {:?}",
                    node.process.name(),
                    node.process.exit_status()
                );
                log(what.clone());
                unexpected.push(what);
                node.process.restart();
            }
        }
        if now >= next_fault && rng.chance(0.1) {
            next_fault = now + rng.millis(300, 2500);
            let up: Vec<bool> = nodes.iter().map(|n| n.down.is_none()).collect();
            if let Some(standby) = arm_wrong_revoke(&drivers, &up).await {
                *counts.entry(("driver", Fault::WrongRevoke)).or_default() += 1;
                log(format!(
                    "WrongRevoke of the leader by {}",
                    drivers[standby].name()
                ));
            }
        } else if now >= next_fault {
            next_fault = now + rng.millis(300, 2500);
            let mut i = rng.between(0, nodes.len() as u64 - 1) as usize;
            let leader_now = match ready_drivers(&drivers).await.as_slice() {
                [one] => Some(*one),
                _ => None,
            };
            // Standbys are most of the drivers: aim at the leader often.
            if rng.chance(0.3)
                && let Some(leader) = leader_now
            {
                i = leader;
            }
            let fault = *rng.pick(&[Fault::Kill, Fault::Term, Fault::Pause]);
            let delay = match fault {
                // Some pauses outlast the TTL, so a paused leader is deposed.
                Fault::Pause => rng.millis(300, 2 * TTL_MS + 1000),
                _ => rng.millis(200, 3000),
            };
            let others_up = nodes
                .iter()
                .enumerate()
                .filter(|(j, n)| *j != i && n.driver == nodes[i].driver && n.down.is_none())
                .count();
            let full_outage_ok = rng.chance(0.1);
            let node = &mut nodes[i];
            if node.down.is_none() && (others_up > 0 || full_outage_ok) {
                let name = node.process.name();
                match fault {
                    Fault::Kill => {
                        node.process.kill();
                    }
                    Fault::Term => node.process.term(),
                    Fault::Pause => node.process.pause(),
                    Fault::WrongRevoke => unreachable!("never picked for a node"),
                }
                node.down = Some((fault, now + delay));
                *counts.entry((node.kind(), fault)).or_default() += 1;
                let role = if leader_now == Some(i) {
                    " (leader)"
                } else {
                    ""
                };
                log(format!(
                    "{fault:?} {name}{role} for {delay:?} ({others_up} others up)"
                ));
            }
        }
        watch.poll();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for node in nodes.iter_mut() {
        node.bring_back(&mut log);
    }
    log(format!("schedule over; faults: {counts:?}"));
    let commits_in_chaos = watch.of(Log::Commits.dir()).len();

    let timeout = Duration::from_secs(120 + seconds);
    let epochs =
        finish_and_check(&mut client, &mut watch, &root, QUERY, &sink, total, timeout).await;
    log("FINISHED".into());
    let mut distinct: Vec<u64> = epochs.iter().map(|e| e.1).collect();
    distinct.dedup();
    eprintln!(
        "{} commits ({commits_in_chaos} during the schedule), epochs {distinct:?}; \
         test took {:?}; seed {seed}",
        epochs.len(),
        started.elapsed()
    );
    assert!(
        unexpected.is_empty(),
        "processes exited without a fault: {unexpected:?}"
    );
}
