//! One child process of a test: spawned with its stdout and stderr appended
//! to a log file, controlled with signals, restartable with the same
//! arguments, and always killed and reaped when its handle drops.
//!
//! The state sits behind `Arc<Mutex<..>>` so that the [`crate::Cluster`]
//! that started a process can still kill it (and dump its log) on drop,
//! whoever holds the handle. Every method takes `&self`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// What to run: the program, its arguments, extra environment and cwd.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub log: PathBuf,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) spec: ProcessSpec,
    child: Option<Child>,
    paused: bool,
    last_status: Option<ExitStatus>,
    starts: u32,
}

impl Inner {
    /// SIGCONT if paused, SIGKILL, then reap. Idempotent.
    pub(crate) fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        if let Some(mut child) = self.child.take() {
            if let Ok(Some(status)) = child.try_wait() {
                self.last_status = Some(status);
            } else {
                if self.paused {
                    let _ = signal_pid(child.id(), Signal::SIGCONT);
                }
                let _ = child.kill();
                self.last_status = child.wait().ok();
            }
        }
        self.paused = false;
        self.last_status
    }

    fn poll(&mut self) -> Option<ExitStatus> {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.last_status = Some(status);
            self.child = None;
            self.paused = false;
        }
        if self.child.is_some() {
            None
        } else {
            self.last_status
        }
    }

    fn spawn(&mut self) {
        self.kill_and_reap();
        self.starts += 1;
        let spec = &self.spec;
        let mut log = open_log(&spec.log);
        let _ = writeln!(
            log,
            "----- harness: start #{} of {}: {} {} -----",
            self.starts,
            spec.name,
            spec.program.display(),
            spec.args.join(" ")
        );
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .stdin(Stdio::null());
        cmd.stdout(log.try_clone().expect("clone log handle"));
        cmd.stderr(log);
        // Settings of the developer's shell must not leak into the cluster,
        // except the log filter.
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("SLUICE_") && k != "SLUICE_LOG" {
                cmd.env_remove(&key);
            }
        }
        cmd.env("NO_COLOR", "1");
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot spawn {} ({}): {e}",
                spec.name,
                spec.program.display()
            )
        });
        self.child = Some(child);
        self.last_status = None;
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

fn open_log(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open log {}: {e}", path.display()))
}

fn signal_pid(pid: u32, sig: Signal) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), sig)
}

/// A handle to one child process. Dropping it SIGKILLs and reaps the child
/// (after a SIGCONT if it is paused).
#[derive(Debug)]
pub struct Process {
    inner: Arc<Mutex<Inner>>,
}

impl Process {
    /// Spawns `spec`. Panics if the program cannot be started.
    pub fn spawn(spec: ProcessSpec) -> Process {
        let mut inner = Inner {
            spec,
            child: None,
            paused: false,
            last_status: None,
            starts: 0,
        };
        inner.spawn();
        Process {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    pub(crate) fn shared(&self) -> Arc<Mutex<Inner>> {
        self.inner.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    pub fn name(&self) -> String {
        self.lock().spec.name.clone()
    }

    pub fn log_path(&self) -> PathBuf {
        self.lock().spec.log.clone()
    }

    pub fn args(&self) -> Vec<String> {
        self.lock().spec.args.clone()
    }

    /// The pid of the running child, `None` once it has exited.
    pub fn pid(&self) -> Option<u32> {
        let mut inner = self.lock();
        inner.poll();
        inner.child.as_ref().map(Child::id)
    }

    /// A function that tells the pid of the running child, wherever it is
    /// called (a watcher task), across restarts.
    pub fn pid_source(&self) -> impl Fn() -> Option<u32> + Send + 'static {
        let inner = self.inner.clone();
        move || {
            let mut inner = lock(&inner);
            inner.poll();
            inner.child.as_ref().map(Child::id)
        }
    }

    /// How many times the process has been started (1 after `spawn`).
    pub fn starts(&self) -> u32 {
        self.lock().starts
    }

    pub fn is_running(&self) -> bool {
        self.lock().poll().is_none()
    }

    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// The exit status once the child has exited (and been reaped).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.lock().poll()
    }

    /// SIGKILL, then reap. Returns the exit status.
    pub fn kill(&self) -> Option<ExitStatus> {
        self.lock().kill_and_reap()
    }

    /// Sends SIGTERM; use [`Process::wait_exit`] to wait for the exit.
    pub fn term(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// SIGSTOP: the process freezes with its sockets open.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
        self.lock().paused = true;
    }

    /// SIGCONT after [`Process::pause`].
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
        self.lock().paused = false;
    }

    /// Sends `sig` to the child if it is still running.
    pub fn signal(&self, sig: Signal) {
        let mut inner = self.lock();
        if inner.poll().is_none()
            && let Some(child) = inner.child.as_ref()
        {
            let _ = signal_pid(child.id(), sig);
        }
    }

    /// Starts the process again with the same program, arguments and
    /// environment (so the same ports). A running child is killed first.
    pub fn restart(&self) {
        self.lock().spawn();
    }

    /// Waits up to `timeout` for the child to exit.
    pub async fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        tail_lines(&self.log_path(), n)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.lock().kill_and_reap();
    }
}

/// Locks, ignoring poison: cleanup must run even after a panic.
pub(crate) fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last `n` lines of a file (empty if it cannot be read).
pub fn tail_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
