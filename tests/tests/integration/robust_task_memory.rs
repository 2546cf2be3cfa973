//! A task's work stays within its memory pool and ends when its query
//! stops, and heavy tasks never hold an executor's heartbeats:
//! - a join of two streams on a key that matches most pairs emits far
//!   more rows than its state holds; they count against the executor's
//!   `--max-task-memory-bytes`, so the query fails naming the limit while
//!   the executor's resident memory stays near the pool;
//! - a join that keeps both slots busy for seconds per batch: the
//!   executor's heartbeats stay on time throughout, and `stop` ends the
//!   running tasks' work within a second (the executor's CPU falls idle).

use std::time::{Duration, Instant};

use sluice_tests::scale::PeakRss;
use sluice_tests::{Cluster, Executor, ExecutorOpts, QueryState};

/// The executor's pool per task in the first test: 64 MiB.
const POOL: u64 = 64 << 20;

/// The most resident memory the first test's executor may reach: its
/// pool several times over (two slots, a batch's rows in and out, the
/// allocator's slack), far below what the join's output would take.
const RSS_BOUND: u64 = 640 << 20;

/// A spec joining two rate streams `a` and `b` by `on`.
fn join_spec(name: &str, sink: &std::path::Path, rate: u64, on: &str, extra: &str) -> String {
    let source = format!("    rate: {{partitions: 1, rows_per_second: {rate}}}\n");
    format!(
        "name: {name}\nsources:\n  a:\n{source}  b:\n{source}trigger:\n  interval_ms: 1000\n{extra}sink:\n  files:\n    path: {}\nsql: {:?}\n",
        sink.display(),
        format!("SELECT a.value AS a_value, b.value AS b_value FROM a JOIN b ON {on}")
    )
}

/// The CPU time the process `pid` has used, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the executor runs");
    let after = stat.rsplit_once(')').map(|(_, s)| s).expect("a stat line");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14 and stime 15.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .expect("clock ticks per second") as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// Watches the process `pid` for `watch` from `since`, in steps of 100
/// ms, and returns when, counted from `since`, it last used more than
/// half a core in a step: when a stopped query's tasks ended their work.
async fn last_busy(pid: u32, since: Instant, watch: Duration) -> Duration {
    let step = Duration::from_millis(100);
    let (mut used, mut ended) = (cpu_time(pid), Duration::ZERO);
    while since.elapsed() < watch {
        tokio::time::sleep(step).await;
        let cpu = cpu_time(pid);
        if cpu - used > step / 2 {
            ended = since.elapsed();
        }
        used = cpu;
    }
    ended
}

/// Fails the test once the executor's resident memory passes `bound`:
/// without a bound on the join's output, it would grow until the machine
/// runs out.
async fn rss_watchdog(executor: &Executor, bound: u64) {
    let pid = executor.process().pid().expect("the executor runs");
    loop {
        if let Some(rss) = sluice_tests::scale::rss_bytes(pid) {
            assert!(
                rss < bound,
                "the executor's resident memory reached {} MiB, past {} MiB",
                rss >> 20,
                bound >> 20
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_whose_output_outgrows_the_pool_fails_naming_the_limit() {
    let cluster = Cluster::new("join-output-pool");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor_with(
        &drivers,
        ExecutorOpts {
            extra_args: vec!["--max-task-memory-bytes".into(), POOL.to_string()],
            ..Default::default()
        },
    );
    let peak = PeakRss::watch(executor.process().pid_source());
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path("pairs");
    let spec = join_spec("pairs", &sink, 1000, "a.value % 2 = b.value % 2", "");
    client.submit(&spec).await.expect("submit");

    let started = Instant::now();
    let failed = tokio::select! {
        s = client.wait_state("pairs", QueryState::Failed, Duration::from_secs(120)) => s,
        () = rss_watchdog(&executor, RSS_BOUND) => unreachable!("the watchdog only fails"),
    };
    let peak = peak.peak();
    eprintln!(
        "failed after {:?}, executor peak RSS {} MiB: {}",
        started.elapsed(),
        peak >> 20,
        failed.error
    );
    for w in ["ran out of its memory", "--max-task-memory-bytes"] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    assert!(
        peak < RSS_BOUND,
        "peak RSS {} MiB, past {} MiB",
        peak >> 20,
        RSS_BOUND >> 20
    );
    assert!(executor.process().is_running(), "the executor died");
    assert_eq!(executor.process().starts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_tasks_keep_heartbeats_on_time_and_stop_within_a_second() {
    let cluster = Cluster::new("heavy-stop");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor_with(
        &drivers,
        ExecutorOpts {
            slots: 2,
            ..Default::default()
        },
    );
    let pid = executor.process().pid().expect("the executor runs");
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path("heavy");
    // Every row of a matches a quarter of b's by key, and about one pair
    // in 5,000 passes the filter: seconds of matching per batch in each of
    // the two state partitions, with a modest output. A batch holds at
    // most 20,000 new rows however late it starts, so the work between
    // two yields stays the same on a loaded machine.
    let on = "a.value % 4 = b.value % 4 AND (a.value + b.value) % 10007 = 0";
    let extra = "state_partitions: 2\nmax_rows_per_batch: 20000\n";
    let spec = join_spec("heavy", &sink, 20_000, on, extra);
    client.submit(&spec).await.expect("submit");
    client
        .wait_committed("heavy", 1, Duration::from_secs(60))
        .await;

    // Until the executor has used most of a core for two seconds in a row
    // (its two tasks match, on a machine other tests share), the
    // heartbeats are watched.
    let mut busy_since: Option<Instant> = None;
    let mut oldest_heartbeat = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut at, mut used) = (Instant::now(), cpu_time(pid));
    while busy_since.is_none_or(|t| t.elapsed() < Duration::from_secs(2)) {
        assert!(Instant::now() < deadline, "the executor never got busy");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let info = client.cluster_info().await.expect("cluster");
        let executor_info = info.executors.first().expect("the executor is attached");
        oldest_heartbeat = oldest_heartbeat.max(executor_info.heartbeat_age_ms);
        let (now, cpu) = (Instant::now(), cpu_time(pid));
        let cores = (cpu - used).as_secs_f64() / (now - at).as_secs_f64();
        (at, used) = (now, cpu);
        busy_since = match cores >= 0.8 {
            true => busy_since.or(Some(now)),
            false => None,
        };
    }
    eprintln!("oldest heartbeat while busy: {oldest_heartbeat} ms");
    assert!(
        oldest_heartbeat < 1000,
        "a heartbeat was {oldest_heartbeat} ms old while tasks ran (every 200 ms)"
    );

    let stopped = Instant::now();
    client.stop("heavy").await.expect("stop");
    let ended = last_busy(pid, stopped, Duration::from_secs(4)).await;
    eprintln!("the executor's tasks worked until {ended:?} after stop");
    assert!(
        ended < Duration::from_secs(1),
        "the executor still worked {ended:?} after stop"
    );
    let status = client.get("heavy").await.expect("get");
    assert_eq!(status.state(), QueryState::Stopped, "{status:#?}");
    assert!(executor.process().is_running(), "the executor died");
}
