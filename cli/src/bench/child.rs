//! Child processes for the benchmarks that kill things (always killed and
//! reaped on drop), and polling of a query's `commits/` directory.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sluice_common::storage::{Path as StoragePath, Storage};

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

impl Drop for ChildProcess {
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
pub async fn commit_above(dir: &Path, above: Option<u64>) -> anyhow::Result<u64> {
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

/// [`highest_commit`] of a commit log opened through storage (any
/// backend; one LIST).
pub async fn highest_commit_at(log: &Storage) -> anyhow::Result<Option<u64>> {
    let files = log.list_files(&StoragePath::from("")).await?;
    Ok(highest_batch(
        files.iter().filter_map(|m| m.location.filename()),
    ))
}

/// [`commit_above`] of a commit log opened through storage.
pub async fn commit_above_at(log: &Storage, above: Option<u64>) -> anyhow::Result<u64> {
    let deadline = Instant::now() + COMMIT_LIMIT;
    loop {
        if let Some(b) = highest_commit_at(log)
            .await?
            .filter(|&b| above.is_none_or(|a| b > a))
        {
            return Ok(b);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no commit above {above:?} in {} within {COMMIT_LIMIT:?}",
            log.describe(&StoragePath::from(""))
        );
        tokio::time::sleep(POLL).await;
    }
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
