//! `sluice-bench state-scale`: a large state touched a little at a time.
//! `SELECT value % K AS k, count(*) AS n FROM input GROUP BY value % K` in
//! update mode over the rate source, K = `--keys` (10 M), on a `sluice
//! driver` and one `sluice executor` child process (2 slots, its defaults:
//! the state memory bound `--state-memory-bytes` is not passed, so the
//! executor runs with its default), the state in the spec's default
//! `state_partitions` ([`DEFAULT_STATE_PARTITIONS`]).
//!
//! The rate source holds K + T × K/100 rows, T = `--batches` (40), every
//! one available at once (trigger 0), in batches of K/100 rows (rounded
//! up). A query's batch size is fixed: the spec's `max_rows_per_batch`
//! caps every batch the same, and the driver's `--max-rows-per-batch` (a
//! default for specs without one) could only change with a driver
//! restart, whose planned batch replays at the old size. So every batch
//! has the same size, the one Spark's `rate-micro-batch` (`rowsPerBatch`)
//! gives too, and the first 100 batches are the fill: batch `i` holds the
//! values `[i × K/100, (i + 1) × K/100)`, K/100 consecutive values and so
//! K/100 distinct keys. The batches from 100 on start at or above K: their
//! state already holds every key, and each touches 1 % of it. Only those
//! are measured. (For K not a multiple of 100 the fill is the
//! ⌈K / ⌈K/100⌉⌉ batches that start below K, and the total rounds up to
//! whole batches.)
//!
//! ```text
//!  fill: batches 0..100, K new keys  │ T touch batches of K/100 keys each
//!  ──────────────────────────────────┼──────────┬──────────┬─────────────
//!                                    │  T/4     │  T/2     │ to FINISHED
//!                           SIGKILL driver ─┘   SIGKILL executor ─┘
//! ```
//!
//! Reported:
//! - per-batch time of the touch batches, from the query's progress
//!   (`duration_ms.total` and `.reduce`): median and p99, without the
//!   first batch after each restart (reported on its own);
//! - the executor's RSS (`/proc/<pid>/status` VmRSS, sampled every 200 ms,
//!   both executor processes): the peak, the last sample, the RSS when the
//!   fill was committed, and each process's VmHWM (the first read just
//!   before its SIGKILL, the second at the end); the driver's peak beside;
//! - restart to the first new commit, polling `commits/` every 5 ms: once
//!   T/4 touch batches are committed the driver alone is SIGKILLed and
//!   restarted (the executor keeps its state in memory); once T/2 are, the
//!   executor alone is SIGKILLed (after the driver's commits settle, since
//!   it may still commit a batch whose tasks had all reported) and
//!   restarted: the next batch rebuilds the whole state from its
//!   checkpoint (the latest snapshot, then the deltas after it).
//!
//! Targets (the issue's, for 10 M keys on this machine): median batch
//! under 300 ms, executor RSS under 1 GiB, each restart under 5 s; `met`
//! says which held. The query runs to FINISHED, and the sink check reads
//! every row the jsonl sink committed (K fill rows and T × K/100 more,
//! keeping one slot per key in memory: at 10 M keys about 6 s, and 1.3 GB
//! peak for the whole `sluice-bench` process, in a release build) and
//! wants the last row of every key to hold its exact count; it decides the
//! exit code, the targets do not.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use sluice_common::checkpoint::{Checkpoint, QueryCheckpoint};
use sluice_common::spec::{DEFAULT_SNAPSHOT_INTERVAL, DEFAULT_STATE_PARTITIONS};
use sluice_common::storage::Stores;
use sluice_proto::{BatchProgress, QueryState};
use tokio_util::sync::CancellationToken;

use super::args::{BenchArgs, RUN_LIMIT, UNBOUNDED_RPS, cores, kept_on_failure, workdir};
use super::child::{self, ChildProcess, POLL, commit, commit_above, highest_commit};
use super::state_check::{check_latest, count_below};
use sluice_cli::client::Client;
use sluice_cli::queries::{self, RateQuery};
use sluice_cli::stats::{Summary, round3};
use sluice_cli::{output, progress};

const QUERY: &str = "bench-state-scale";
const SLOTS: u32 = 2;
/// Batches of the fill: each holds 1 % of the keys.
const FILL_BATCHES: u64 = 100;
/// How often the RSS of the children is sampled.
const RSS_EVERY: Duration = Duration::from_millis(200);
/// How long the commits must stand still after the executor's SIGKILL.
const SETTLE: Duration = Duration::from_secs(1);
/// The issue's targets.
const TARGET_BATCH_MEDIAN_MS: u64 = 300;
const TARGET_RSS_BYTES: u64 = 1 << 30;
const TARGET_RESTART_MS: u64 = 5000;

/// The shape of the run: `keys` keys, batches of `step` values; the fill
/// is the values `0..keys`, then `touch` batches.
#[derive(Debug, Clone, Copy)]
struct Plan {
    keys: u64,
    step: u64,
    touch: u64,
    total: u64,
}

impl Plan {
    fn new(keys: u64, touch: u64) -> Self {
        let step = keys.div_ceil(FILL_BATCHES);
        let fill = keys.div_ceil(step);
        Plan {
            keys,
            step,
            touch,
            total: (fill + touch) * step,
        }
    }

    /// The first batch that starts at or above `keys`.
    fn first_touch(&self) -> u64 {
        self.keys.div_ceil(self.step)
    }

    /// The value a commit must reach for `n` touch batches to be committed.
    fn after_touch(&self, n: u64) -> u64 {
        self.first_touch() * self.step + n * self.step
    }
}

/// One restart: the last commit before the SIGKILL, the first after the
/// restart, and the time from the restart to it.
#[derive(Debug, Clone, Copy)]
struct Restart {
    before: u64,
    after: u64,
    ms: f64,
}

impl Restart {
    fn to_json(self, batches: &BTreeMap<u64, BatchProgress>) -> Value {
        let first = batches.get(&(self.before + 1));
        let d = first.and_then(|p| p.duration_ms).unwrap_or_default();
        json!({
            "killed_after_batch": self.before,
            "first_commit_after_restart": self.after,
            "restart_to_commit_ms": round3(self.ms),
            "first_batch": first.map(|p| json!({
                "batch": p.batch_id,
                "state_rows": p.state_rows_total,
                "map_ms": d.map,
                "reduce_ms": d.reduce,
                "total_ms": d.total,
            })),
        })
    }
}

/// What the run showed.
struct Measured {
    driver: Restart,
    executor: Restart,
    /// Every batch's progress, from the last driver.
    batches: BTreeMap<u64, BatchProgress>,
    /// The executor's VmRSS once the fill was committed.
    rss_at_fill: Option<u64>,
    /// VmHWM of the first executor (read before its SIGKILL), and of the
    /// second at the end; the second's last VmRSS.
    hwm_first: Option<u64>,
    hwm_second: Option<u64>,
    rss_end: Option<u64>,
}

/// The children's RSS, sampled in the background: the pids to sample (0
/// while a child is down) and what was seen.
#[derive(Default)]
struct RssProbe {
    executor: AtomicU32,
    driver: AtomicU32,
    seen: Mutex<RssSeen>,
}

#[derive(Debug, Default, Clone, Copy)]
struct RssSeen {
    samples: u64,
    executor_peak: u64,
    executor_last: Option<u64>,
    driver_peak: u64,
}

impl RssProbe {
    fn track(slot: &AtomicU32, child: &ChildProcess) {
        slot.store(child.pid().unwrap_or(0), Ordering::SeqCst);
    }

    fn sample(&self) {
        let read = |slot: &AtomicU32| match slot.load(Ordering::SeqCst) {
            0 => None,
            pid => proc_status_bytes(pid, "VmRSS"),
        };
        let (executor, driver) = (read(&self.executor), read(&self.driver));
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = executor {
            seen.samples += 1;
            seen.executor_peak = seen.executor_peak.max(r);
            seen.executor_last = Some(r);
        }
        if let Some(r) = driver {
            seen.driver_peak = seen.driver_peak.max(r);
        }
    }

    fn seen(&self) -> RssSeen {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Samples every [`RSS_EVERY`] until `stop` is cancelled.
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(RSS_EVERY);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => self.sample(),
            }
        }
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes;
/// `None` when the process or the field is gone (or not on Linux).
fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kb = rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
        Some(kb * 1024)
    })
}

fn child_status(child: &ChildProcess, field: &str) -> Option<u64> {
    proc_status_bytes(child.pid()?, field)
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let keys = args.keys.unwrap_or(10_000_000);
    let touch = args.batches.unwrap_or(40);
    anyhow::ensure!(
        keys >= FILL_BATCHES,
        "--keys must be at least {FILL_BATCHES}"
    );
    anyhow::ensure!(
        touch >= 8,
        "--batches must be at least 8: the touch batches hold both kills and those measured after"
    );
    let plan = Plan::new(keys, touch);
    let (dir, root, out) = workdir()?;
    let (addr, mut driver, mut executor) =
        child::driver_and_executor(dir.path(), &root, "bench-scale", SLOTS)?;
    let partitions = args.partitions.unwrap_or(8);
    let sql =
        format!("SELECT value % {keys} AS k, count(*) AS n FROM input GROUP BY value % {keys}");
    let q = RateQuery {
        name: QUERY.into(),
        partitions,
        rows_per_second: UNBOUNDED_RPS,
        total_rows: Some(plan.total),
        trigger_ms: 0,
        max_rows_per_batch: Some(plan.step),
        sink: out.clone(),
        sql: Some(sql.clone()),
        format: "jsonl",
    };
    let spec = q.spec_text_with(json!({ "output_mode": "update" }));
    let commits = Checkpoint::open(&Stores::default(), &root)?.query(QUERY);
    let probe = Arc::new(RssProbe::default());
    let stop_probe = CancellationToken::new();
    let sampler = tokio::spawn(probe.clone().run(stop_probe.clone()));
    let t0 = Instant::now();
    let measured = tokio::select! {
        biased;
        _ = shutdown.cancelled() => Err(anyhow::anyhow!("interrupted")),
        r = measure(&addr, &spec, plan, &commits, &mut driver, &mut executor, &probe) => r,
    };
    let run_seconds = t0.elapsed().as_secs_f64();
    stop_probe.cancel();
    if let Err(e) = sampler.await {
        tracing::warn!(error = %e, "the RSS sampler failed; its figures stop early");
    }
    executor.kill()?;
    driver.kill()?;
    let (m, _dir) = kept_on_failure(measured, shutdown.is_cancelled(), dir, "state scale")?;
    let t_check = Instant::now();
    let (check, exact) = check_latest(&out, keys, &["n"], |k| {
        vec![i128::from(count_below(plan.total, keys, k))]
    })
    .await?;
    let check_seconds = t_check.elapsed().as_secs_f64();

    // The touch batches, but the first after each restart.
    let restarted = [m.driver.before + 1, m.executor.before + 1];
    let measured_batches: Vec<&BatchProgress> = m
        .batches
        .range(plan.first_touch()..)
        .filter(|(b, _)| !restarted.contains(b))
        .map(|(_, p)| p)
        .collect();
    let times = |f: fn(&sluice_proto::Durations) -> u64| -> Vec<f64> {
        measured_batches
            .iter()
            .map(|p| f(&p.duration_ms.unwrap_or_default()) as f64)
            .collect()
    };
    let total_ms = Summary::of(&times(|d| d.total));
    let reduce_ms = Summary::of(&times(|d| d.reduce));
    let rows: Vec<f64> = measured_batches
        .iter()
        .map(|p| p.num_input_rows as f64)
        .collect();
    let state_rows = measured_batches.last().map(|p| p.state_rows_total);
    let state_bytes = measured_batches.last().map(|p| p.state_bytes);

    let seen = probe.seen();
    let rss_peak = [Some(seen.executor_peak), m.hwm_first, m.hwm_second]
        .into_iter()
        .flatten()
        .max()
        .filter(|&r| r > 0);
    let restart_ms = m.driver.ms.max(m.executor.ms);
    let median = total_ms.as_ref().map(|s| s.median);
    let figures = json!({
        "scenario": "state-scale",
        "cores": cores(),
        "sql": sql,
        "keys": keys,
        "rows_per_batch": plan.step,
        "touched_per_batch_pct": round3(plan.step as f64 * 100.0 / keys as f64),
        "fill_batches": plan.first_touch(),
        "touch_batches": touch,
        "total_rows": plan.total,
        "partitions": partitions,
        "output_mode": "update",
        "state_partitions": DEFAULT_STATE_PARTITIONS,
        "snapshot_interval": DEFAULT_SNAPSHOT_INTERVAL,
        "trigger_ms": 0,
        "executors": 1,
        "slots": SLOTS,
        "poll_ms": POLL.as_millis(),
        "run_seconds": round3(run_seconds),
        "batch_ms": {
            "batches": measured_batches.len(),
            "first_batch": measured_batches.first().map(|p| p.batch_id),
            "excluded_after_restart": restarted,
            "median_rows": Summary::of(&rows).map(|s| s.median),
            "total": total_ms.as_ref().map(Summary::to_json),
            "reduce": reduce_ms.as_ref().map(Summary::to_json),
        },
        "state_rows": state_rows,
        "state_bytes": state_bytes,
        "executor_rss_bytes": {
            "peak": rss_peak,
            "peak_sampled": (seen.executor_peak > 0).then_some(seen.executor_peak),
            "last_sampled": seen.executor_last,
            "at_fill": m.rss_at_fill,
            "end": m.rss_end,
            "hwm_first_process": m.hwm_first,
            "hwm_second_process": m.hwm_second,
            "samples": seen.samples,
            "sample_ms": RSS_EVERY.as_millis(),
        },
        "driver_rss_peak_bytes": (seen.driver_peak > 0).then_some(seen.driver_peak),
        "driver_restart": m.driver.to_json(&m.batches),
        "executor_restart": m.executor.to_json(&m.batches),
        "batches": m.batches.keys().next_back().map(|b| b + 1),
        "targets": {
            "batch_median_ms": TARGET_BATCH_MEDIAN_MS,
            "rss_bytes": TARGET_RSS_BYTES,
            "restart_ms": TARGET_RESTART_MS,
        },
        "met": {
            "batch_median_ms": median.map(|v| v < TARGET_BATCH_MEDIAN_MS as f64),
            "rss_bytes": rss_peak.map(|v| v < TARGET_RSS_BYTES),
            "restart_ms": restart_ms < TARGET_RESTART_MS as f64,
        },
        "check_seconds": round3(check_seconds),
        "verify": check,
    });
    Ok((figures, u8::from(!exact)))
}

/// Starts `child` again after its SIGKILL, once the query is still
/// running past `before` (of `total` rows): how long until a commit after
/// `before`. Its RSS is sampled from then on.
async fn restart(
    commits: &QueryCheckpoint,
    (before, total): (u64, u64),
    child: &mut ChildProcess,
    slot: &AtomicU32,
) -> anyhow::Result<Restart> {
    ensure_running(commits, before, total).await?;
    let t0 = Instant::now();
    child.start()?;
    RssProbe::track(slot, child);
    let after = commit_above(commits, Some(before)).await?;
    Ok(Restart {
        before,
        after,
        ms: t0.elapsed().as_secs_f64() * 1000.0,
    })
}

/// Starts both children, submits the query, kills and restarts the
/// driver and then the executor at their points (see the module's
/// header), follows the query to FINISHED and reads its progress.
async fn measure(
    addr: &str,
    spec: &str,
    plan: Plan,
    commits: &QueryCheckpoint,
    driver: &mut ChildProcess,
    executor: &mut ChildProcess,
    probe: &RssProbe,
) -> anyhow::Result<Measured> {
    driver.start()?;
    RssProbe::track(&probe.driver, driver);
    executor.start()?;
    RssProbe::track(&probe.executor, executor);
    let mut client = Client::new(vec![addr.to_string()])?;
    queries::wait_for_executors(&mut client, 1, Duration::from_secs(30)).await?;
    queries::submit(&mut client, spec).await?;

    commit_reaching(commits, plan.keys).await?;
    let rss_at_fill = child_status(executor, "VmRSS");
    tracing::info!(rss_at_fill, "state filled");

    // The driver alone.
    commit_reaching(commits, plan.after_touch(plan.touch / 4)).await?;
    probe.driver.store(0, Ordering::SeqCst);
    driver.kill()?;
    // Read after the kill: only the driver commits.
    let before = highest_commit(commits)
        .await?
        .context("no commit before the driver's kill")?;
    let driver_restart = restart(commits, (before, plan.total), driver, &probe.driver).await?;
    tracing::info!(?driver_restart, "driver restarted");

    // The executor alone.
    commit_reaching(commits, plan.after_touch(plan.touch / 2)).await?;
    let hwm_first = child_status(executor, "VmHWM");
    probe.executor.store(0, Ordering::SeqCst);
    executor.kill()?;
    let before = settled_commit(commits).await?;
    let executor_restart =
        restart(commits, (before, plan.total), executor, &probe.executor).await?;
    tracing::info!(?executor_restart, "executor restarted");

    let mut client = Client::new(vec![addr.to_string()])?;
    let status = queries::wait_terminal(&mut client, QUERY, RUN_LIMIT).await?;
    anyhow::ensure!(
        status.state() == QueryState::Finished,
        "query {QUERY} ended {}: {}",
        output::state_name(status.state),
        status.error
    );
    let hwm_second = child_status(executor, "VmHWM");
    let rss_end = child_status(executor, "VmRSS");
    let mut batches = BTreeMap::new();
    let token = CancellationToken::new();
    progress::stream(&mut client, QUERY, false, &token, |p| {
        batches.insert(p.batch_id, p.clone());
    })
    .await?;
    Ok(Measured {
        driver: driver_restart,
        executor: executor_restart,
        batches,
        rss_at_fill,
        hwm_first,
        hwm_second,
        rss_end,
    })
}

/// Fails when commit `batch` already covers every row: no batch is left
/// to time a restart by.
async fn ensure_running(commits: &QueryCheckpoint, batch: u64, total: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        commit(commits, batch).await?.end_value < total,
        "the query finished before a kill: raise --batches"
    );
    Ok(())
}

/// The highest commit once no new one has appeared for [`SETTLE`]: after
/// the executor's SIGKILL, the driver may still commit a batch whose tasks
/// had all reported, and that commit must not count as the restart's.
async fn settled_commit(commits: &QueryCheckpoint) -> anyhow::Result<u64> {
    let mut last = highest_commit(commits).await?;
    let mut since = Instant::now();
    while since.elapsed() < SETTLE {
        tokio::time::sleep(POLL).await;
        let now = highest_commit(commits).await?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last.context("no commit before the executor's kill")
}

/// Waits for a commit whose batches cover the values `0..rows`; returns it.
async fn commit_reaching(commits: &QueryCheckpoint, rows: u64) -> anyhow::Result<u64> {
    let mut seen = None;
    loop {
        let b = commit_above(commits, seen).await?;
        if commit(commits, b).await?.end_value >= rows {
            return Ok(b);
        }
        seen = Some(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fill_is_a_hundred_batches_and_touches_start_at_the_keys() {
        let p = Plan::new(10_000_000, 40);
        assert_eq!(p.step, 100_000);
        assert_eq!(p.first_touch(), 100);
        assert_eq!(p.total, 14_000_000);
        assert_eq!(p.after_touch(10), 11_000_000);
        // Keys that are not a multiple of 100: the step rounds up, and the
        // first touch batch still starts at or above the keys.
        let p = Plan::new(1_050, 8);
        assert_eq!(p.step, 11);
        assert_eq!(p.first_touch(), 96);
        assert!(p.first_touch() * p.step >= p.keys);
        assert!((p.first_touch() - 1) * p.step < p.keys);
        assert_eq!(p.total, (96 + 8) * 11);
        assert_eq!(p.after_touch(8), p.total);
    }

    #[test]
    fn status_fields_parse_in_bytes() {
        let me = std::process::id();
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(proc_status_bytes(me, "VmRSS").is_some_and(|b| b > 0));
            assert_eq!(proc_status_bytes(me, "NoSuchField"), None);
        }
    }
}
