//! Child processes for the benchmarks that kill things (always killed and
//! reaped on drop), and polling of a query's commits through its checkpoint.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_common::checkpoint::{CommitRecord, Log, QueryCheckpoint};

pub const POLL: Duration = Duration::from_millis(5);
const COMMIT_LIMIT: Duration = Duration::from_secs(60);

/// A child process (a driver, an executor, etcd) that can be signalled and
/// restarted with the same flags. Dropping it kills and reaps the child.
pub struct ChildProcess {
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    env: Vec<(String, String)>,
    dir: Option<PathBuf>,
    child: Option<Child>,
}

impl ChildProcess {
    pub fn new(bin: PathBuf, args: Vec<String>, log: PathBuf) -> Self {
        ChildProcess {
            bin,
            args,
            log,
            env: Vec::new(),
            dir: None,
            child: None,
        }
    }

    /// The child with these environment variables too.
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// The child, started in `dir`.
    pub fn in_dir(mut self, dir: PathBuf) -> Self {
        self.dir = Some(dir);
        self
    }

    /// This `sluice` executable running `subcommand` (`driver` or
    /// `executor`) with `args`.
    pub fn sluice(subcommand: &str, args: Vec<String>, log: PathBuf) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot locate the sluice executable")?;
        let args = std::iter::once(subcommand.to_string())
            .chain(args)
            .collect();
        Ok(Self::new(exe, args, log))
    }

    pub fn start(&mut self) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let mut command = Command::new(&self.bin);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        let child = command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// The running child's process id; `None` before a start or after a
    /// kill.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` without waiting for the child to exit.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let child = self.child.as_ref().context("the child is not running")?;
        let pid = i32::try_from(child.id()).context("child pid out of range")?;
        kill(Pid::from_raw(pid), signal).with_context(|| format!("cannot send {signal}"))
    }

    /// Reaps the child after a signal, waiting at most `limit`; kills it if
    /// it is still running by then.
    pub async fn reap(&mut self, limit: Duration) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + limit;
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                child.wait()?;
                anyhow::bail!("{} did not exit within {limit:?}", self.bin.display());
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.stop_with(Signal::SIGKILL)
    }

    /// Sends `signal` and reaps the child once it exits.
    pub fn stop_with(&mut self, signal: Signal) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = i32::try_from(child.id()).context("child pid out of range")?;
        kill(Pid::from_raw(pid), signal).with_context(|| format!("cannot send {signal}"))?;
        child.wait().context("cannot reap the child")?;
        Ok(())
    }
}

/// The environment of an executor child, as the Kubernetes manifests set
/// it (deploy/k8s/base/kustomization.yaml): glibc's malloc with two
/// arenas, not eight per core, each of which keeps what its threads
/// freed (docs/design-notes.md, "State larger than memory"). A value in
/// the benchmark's own environment wins.
pub const EXECUTOR_ENV: [(&str, &str); 1] = [("MALLOC_ARENA_MAX", "2")];

/// [`EXECUTOR_ENV`], each value overridden by the benchmark's environment.
fn executor_env() -> Vec<(String, String)> {
    EXECUTOR_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), std::env::var(k).unwrap_or(v.to_string())))
        .collect()
}

/// A local cluster of two child processes: a `sluice driver` on a free
/// port over the checkpoint `root`, and one `sluice executor` with `slots`
/// slots and 200 ms heartbeats attached to it (in [`EXECUTOR_ENV`]), both
/// logging into `dir`, neither started yet. Returns the driver's address
/// too.
pub fn driver_and_executor(
    dir: &std::path::Path,
    root: &str,
    name: &str,
    slots: u32,
) -> anyhow::Result<(String, ChildProcess, ChildProcess)> {
    let listen = sluice_cli::inproc::free_addr()?;
    let addr = sluice_cli::inproc::advertise(listen);
    let driver_args =
        sluice_cli::inproc::driver_args(listen, None, root, &format!("{name}-driver"));
    let driver = ChildProcess::sluice("driver", driver_args, dir.join("driver.log"))?;
    let executor_args = [
        "--driver",
        &addr,
        "--slots",
        &slots.to_string(),
        "--heartbeat-ms",
        "200",
        "--id",
        &format!("{name}-executor"),
    ]
    .map(str::to_string)
    .to_vec();
    let executor = ChildProcess::sluice("executor", executor_args, dir.join("executor.log"))?
        .with_env(executor_env());
    Ok((addr, driver, executor))
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The highest committed batch of a query, `None` before its first.
pub async fn highest_commit(qc: &QueryCheckpoint) -> anyhow::Result<Option<u64>> {
    Ok(qc.latest(Log::Commits).await?)
}

/// Polls until a commit above `above` appears; returns its batch id.
pub async fn commit_above(qc: &QueryCheckpoint, above: Option<u64>) -> anyhow::Result<u64> {
    let deadline = Instant::now() + COMMIT_LIMIT;
    loop {
        if let Some(b) = highest_commit(qc)
            .await?
            .filter(|&b| above.is_none_or(|a| b > a))
        {
            return Ok(b);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no commit above {above:?} in {} within {COMMIT_LIMIT:?}",
            qc.describe_dir()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Commit `batch` of a query, which must exist.
pub async fn commit(qc: &QueryCheckpoint, batch: u64) -> anyhow::Result<CommitRecord> {
    Ok(qc.require_entry(Log::Commits, batch).await?)
}
