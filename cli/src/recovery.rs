//! `sluice bench recovery`: the `sluice-driver` binary runs as a child
//! process (always killed on exit or panic by [`DriverProcess`]'s `Drop`),
//! with one in-process executor. Each round SIGKILLs the driver, restarts it
//! at once with the same flags, and times the kill → first new commit, by
//! polling the query's `commits/` directory every 5 ms.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::bench::{BenchArgs, cores, workdir};
use crate::client::Client;
use crate::inproc::{self, InProcess};
use crate::queries::{self, RateQuery};
use crate::stats::{Summary, round3};
use crate::verify;

const POLL: Duration = Duration::from_millis(5);
const COMMIT_LIMIT: Duration = Duration::from_secs(60);
const TRIGGER_MS: u64 = 200;
const ROWS_PER_SECOND: u64 = 100_000;
const QUERY: &str = "bench-recovery";

/// A `sluice-driver` child process that can be killed and restarted with
/// the same flags. Dropping it kills the child.
pub struct DriverProcess {
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl DriverProcess {
    pub fn new(bin: PathBuf, args: Vec<String>, log: PathBuf) -> Self {
        DriverProcess {
            bin,
            args,
            log,
            child: None,
        }
    }

    /// The `sluice-driver` binary next to the current executable.
    pub fn locate() -> anyhow::Result<PathBuf> {
        let exe = std::env::current_exe().context("cannot locate the sluice executable")?;
        let dir = exe
            .parent()
            .context("the sluice executable has no directory")?;
        let bin = dir.join("sluice-driver");
        anyhow::ensure!(
            bin.is_file(),
            "the recovery benchmark needs the sluice-driver binary next to {} (looked for {}); \
             build it with `cargo build --release -p sluice-driver`",
            exe.display(),
            bin.display()
        );
        Ok(bin)
    }

    pub fn start(&mut self) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = i32::try_from(child.id()).context("child pid out of range")?;
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("cannot SIGKILL the driver")?;
        child.wait().context("cannot reap the driver")?;
        Ok(())
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The highest batch id among checkpoint log file names (20-digit numbers;
/// anything else, such as a temporary `.name`, is ignored).
pub fn highest_batch<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Option<u64> {
    names
        .into_iter()
        .filter_map(|n| {
            let n = n.as_ref();
            let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| n.parse::<u64>().ok()).flatten()
        })
        .max()
}

/// The highest committed batch in a `commits/` directory, `None` when empty
/// or absent.
pub fn highest_commit(dir: &Path) -> anyhow::Result<Option<u64>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let names = entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned());
            Ok(highest_batch(names))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot list {}", dir.display())),
    }
}

/// Polls until a commit above `above` appears; returns its batch id.
async fn commit_above(dir: &Path, above: Option<u64>) -> anyhow::Result<u64> {
    let deadline = Instant::now() + COMMIT_LIMIT;
    loop {
        if let Some(b) = highest_commit(dir)?.filter(|&b| above.is_none_or(|a| b > a)) {
            return Ok(b);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no commit above {above:?} in {} within {COMMIT_LIMIT:?}",
            dir.display()
        );
        tokio::time::sleep(POLL).await;
    }
}

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let bin = DriverProcess::locate()?;
    let (dir, root, out) = workdir()?;
    let listen = inproc::free_addr()?;
    let addr = inproc::advertise(listen);
    let driver_args = inproc::driver_args(listen, None, &root, "bench-recovery-driver");
    let mut driver = DriverProcess::new(bin, driver_args, dir.path().join("driver.log"));
    driver.start()?;
    let mut cluster = InProcess::new(shutdown.child_token());
    cluster.spawn_executor(
        vec![addr.clone()],
        "bench-executor",
        2,
        Duration::from_secs(1),
    );
    let partitions = args.partitions.unwrap_or(4);
    let q = RateQuery {
        name: QUERY.into(),
        partitions,
        rows_per_second: ROWS_PER_SECOND,
        total_rows: None,
        trigger_ms: TRIGGER_MS,
        max_rows_per_batch: None,
        sink: out.clone(),
    };
    let commits = Path::new(&root).join("queries").join(QUERY).join("commits");
    let rounds = cluster
        .supervise(async {
            let mut client = Client::new(vec![addr.clone()])?;
            queries::submit(&mut client, &q.spec_text()).await?;
            commit_above(&commits, Some(1)).await?;
            let mut rounds = Vec::new();
            for i in 0..args.iterations {
                let t0 = Instant::now();
                driver.kill()?;
                // Read after the kill: nothing the old driver did can count.
                let before = highest_commit(&commits)?;
                driver.start()?;
                let after = commit_above(&commits, before).await?;
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                tracing::info!(round = i, ms, ?before, after, "recovered");
                rounds.push(json!({ "ms": round3(ms), "before": before, "after": after }));
                // Let the restarted driver settle before the next kill.
                commit_above(&commits, Some(after)).await?;
            }
            client
                .call(|mut rpc| async move {
                    rpc.stop(sluice_proto::QueryRef {
                        query: QUERY.into(),
                    })
                    .await
                })
                .await?;
            Ok(rounds)
        })
        .await;
    let stopped = cluster.shutdown(inproc::GRACE).await;
    driver.kill()?;
    let rounds = match rounds {
        Ok(r) => r,
        Err(e) if shutdown.is_cancelled() => return Err(e),
        Err(e) => {
            let log = dir.keep().join("driver.log");
            return Err(e.context(format!(
                "recovery failed (driver log kept: {})",
                log.display()
            )));
        }
    };
    stopped?;
    let report = verify::check(&out, None).await?;
    let ms: Vec<f64> = rounds.iter().filter_map(|r| r["ms"].as_f64()).collect();
    let summary = Summary::of(&ms).map_or(Value::Null, |s| s.to_json());
    let figures = json!({
        "scenario": "recovery",
        "cores": cores(),
        "iterations": args.iterations,
        "partitions": partitions,
        "rows_per_second_source": ROWS_PER_SECOND,
        "trigger_ms": TRIGGER_MS,
        "executors": 1,
        "slots": 2,
        "poll_ms": POLL.as_millis(),
        "rounds": rounds,
        "recovery_ms": ms,
        "median_ms": summary["median"],
        "max_ms": summary["max"],
        "summary_ms": summary,
        "verify": verify::report_json(&report),
    });
    Ok((figures, verify::exit_code(&report)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_batch_ignores_other_names() {
        assert_eq!(highest_batch(Vec::<String>::new()), None);
        let names = [
            "00000000000000000003",
            "00000000000000000012",
            ".00000000000000000013.abc.tmp",
            "",
            "x",
        ];
        assert_eq!(highest_batch(names), Some(12));
    }

    #[test]
    fn highest_commit_of_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let commits = dir.path().join("commits");
        assert_eq!(highest_commit(&commits).unwrap(), None);
        std::fs::create_dir(&commits).unwrap();
        for n in [0u64, 1, 7] {
            std::fs::write(commits.join(format!("{n:020}")), b"{}").unwrap();
        }
        assert_eq!(highest_commit(&commits).unwrap(), Some(7));
    }
}
