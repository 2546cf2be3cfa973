//! `sluice-bench state-recovery`: a query with `--keys` (1 M) keys of
//! state, `SELECT value % K AS k, count(*) AS n FROM input GROUP BY
//! value % K` in update mode, on a `sluice driver` and a `sluice executor`
//! child process (always killed on exit by [`ChildProcess`]'s `Drop`).
//!
//! The rate source holds 2 × K rows, every one available at once, in
//! batches of K / 4. Once a commit covers the first K rows (every key is
//! in the state), the driver and the executor are SIGKILLed and restarted
//! at once with the same flags: the reduce tasks of the next batch rebuild
//! the state from storage (the latest snapshot, then the deltas after it;
//! at the default snapshot interval of 10, the four deltas of batches
//! 0..=3). Reported: the restart → first new commit, by polling `commits/`
//! every 5 ms; the state rows that batch held (no key is new by then, so
//! they are the rows reloaded); the reload rate, those rows over that
//! time; and that batch's stage times beside the median reduce of the
//! batches after it, whose state stayed in memory. The target is under
//! 3 s for 1 M keys on 2 cores.
//!
//! The query then runs to FINISHED, and the sink check expects the last
//! row of every key to hold its exact count of the 2 × K values.

use std::collections::BTreeMap;
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

const QUERY: &str = "bench-state-recovery";
const SLOTS: u32 = 2;

/// What the kill and restart showed.
struct Measured {
    /// The last commit before the kill and the first after the restart.
    before: u64,
    after: u64,
    restart_ms: f64,
    /// The batches the restarted driver ran.
    batches: BTreeMap<u64, BatchProgress>,
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let keys = args.keys.unwrap_or(1_000_000);
    anyhow::ensure!(keys >= 4, "--keys must be at least 4");
    let (dir, root, out) = workdir()?;
    let (addr, mut driver, mut executor) =
        child::driver_and_executor(dir.path(), &root, "bench-state", SLOTS)?;
    driver.start()?;
    executor.start()?;
    let partitions = args.partitions.unwrap_or(8);
    let sql =
        format!("SELECT value % {keys} AS k, count(*) AS n FROM input GROUP BY value % {keys}");
    let total = 2 * keys;
    let q = RateQuery {
        name: QUERY.into(),
        partitions,
        rows_per_second: UNBOUNDED_RPS,
        total_rows: Some(total),
        trigger_ms: 0,
        max_rows_per_batch: Some(keys.div_ceil(4)),
        sink: out.clone(),
        sql: Some(sql.clone()),
        format: "jsonl",
    };
    let spec = q.spec_text_with(json!({ "output_mode": "update" }));
    let commits = Checkpoint::open(&Stores::default(), &root)?.query(QUERY);
    let measured = tokio::select! {
        biased;
        _ = shutdown.cancelled() => Err(anyhow::anyhow!("interrupted")),
        r = measure(&addr, &spec, (keys, total), &commits, &mut driver, &mut executor) => r,
    };
    executor.kill()?;
    driver.kill()?;
    let (m, _dir) = kept_on_failure(measured, shutdown.is_cancelled(), dir, "state recovery")?;
    let (check, exact) = check_latest(&out, keys, &["n"], |k| {
        vec![i128::from(count_below(total, keys, k))]
    })
    .await?;
    // The first batch after the restart: the one the kill interrupted.
    let first = m.batches.get(&(m.before + 1));
    let reloaded = first.map(|p| p.state_rows_total);
    let durations = first.and_then(|p| p.duration_ms).unwrap_or_default();
    let later: Vec<f64> = m
        .batches
        .range(m.before + 2..)
        .map(|(_, p)| p.duration_ms.unwrap_or_default().reduce as f64)
        .collect();
    let figures = json!({
        "scenario": "state-recovery",
        "cores": cores(),
        "sql": sql,
        "keys": keys,
        "total_rows": total,
        "rows_per_batch": q.max_rows_per_batch,
        "partitions": partitions,
        "output_mode": "update",
        "state_partitions": DEFAULT_STATE_PARTITIONS,
        "snapshot_interval": DEFAULT_SNAPSHOT_INTERVAL,
        "trigger_ms": 0,
        "executors": 1,
        "slots": SLOTS,
        "poll_ms": POLL.as_millis(),
        "killed_after_batch": m.before,
        "first_commit_after_restart": m.after,
        "restart_to_commit_ms": round3(m.restart_ms),
        "state_rows_reloaded": reloaded,
        "reload_keys_per_second": reloaded.map(|r| (r as f64 * 1000.0 / m.restart_ms).round()),
        "first_batch_ms": {
            "map": durations.map,
            "reduce": durations.reduce,
            "total": durations.total,
        },
        "later_reduce_median_ms": Summary::of(&later).map(|s| s.median),
        "batches": m.batches.keys().next_back().map(|b| b + 1),
        "verify": check,
    });
    Ok((figures, u8::from(!exact)))
}

/// Submits the query, kills the driver and the executor once every key is
/// in the state (the first `keys` of `total` rows are committed), restarts
/// both and times the first new commit, then follows the query to its end.
async fn measure(
    addr: &str,
    spec: &str,
    (keys, total): (u64, u64),
    commits: &QueryCheckpoint,
    driver: &mut ChildProcess,
    executor: &mut ChildProcess,
) -> anyhow::Result<Measured> {
    let mut client = Client::new(vec![addr.to_string()])?;
    queries::wait_for_executors(&mut client, 1, Duration::from_secs(30)).await?;
    queries::submit(&mut client, spec).await?;
    commit_reaching(commits, keys).await?;
    driver.kill()?;
    executor.kill()?;
    // Read after the kill: nothing the old processes did can count.
    let before = highest_commit(commits)
        .await?
        .context("no commit before the kill")?;
    anyhow::ensure!(
        commit(commits, before).await?.end_value < total,
        "the query finished before the kill: too few rows to measure a reload"
    );
    let t0 = Instant::now();
    driver.start()?;
    executor.start()?;
    let after = commit_above(commits, Some(before)).await?;
    let restart_ms = t0.elapsed().as_secs_f64() * 1000.0;
    tracing::info!(before, after, restart_ms, "state reloaded");
    let mut client = Client::new(vec![addr.to_string()])?;
    let status = queries::wait_terminal(&mut client, QUERY, RUN_LIMIT).await?;
    anyhow::ensure!(
        status.state() == QueryState::Finished,
        "query {QUERY} ended {}: {}",
        output::state_name(status.state),
        status.error
    );
    let mut batches = BTreeMap::new();
    let token = CancellationToken::new();
    progress::stream(&mut client, QUERY, false, &token, |p| {
        batches.insert(p.batch_id, p.clone());
    })
    .await?;
    Ok(Measured {
        before,
        after,
        restart_ms,
        batches,
    })
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
