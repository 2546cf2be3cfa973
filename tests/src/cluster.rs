//! A test cluster of real processes in one temporary directory:
//!
//! ```text
//! <tmp>/checkpoint/        the checkpoint root shared by every driver
//! <tmp>/sinks/<name>/      sink paths handed out by `sink_path`
//! <tmp>/logs/<proc>.log    stdout + stderr of each process, across restarts
//! <tmp>/specs/             spec files written for `sluice submit`
//! ```
//!
//! Dropping the cluster SIGKILLs and reaps every process it started, and
//! when the test is panicking prints the tail of each log to stderr.
//! `SLUICE_KEEP_TMP=1` keeps the directory of a failed test.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::bins::{DRIVER, EXECUTOR, node};
use crate::cli::{CliOutput, run_cli};
use crate::client::Client;
use crate::node::{Driver, Executor, READY_TIMEOUT};
use crate::ports::free_addr;
use crate::process::{Inner, Process, ProcessSpec, lock};

/// Lines of each log printed when a test fails.
pub const LOG_TAIL_LINES: usize = 60;
/// Flags of one driver; `Default` is a standalone test driver.
#[derive(Debug, Clone)]
pub struct DriverOpts {
    pub id: Option<String>,
    pub executor_timeout_ms: u64,
    /// `--etcd URL[,URL]` (issue 3); empty for a standalone driver.
    pub etcd: Vec<String>,
    pub cluster: Option<String>,
    pub lease_ttl_ms: Option<u64>,
    pub extra_args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `--checkpoint-root`, when not the cluster's own directory (an
    /// `s3://` root).
    pub checkpoint_root: Option<String>,
    /// The driver's limit on open files (soft and hard), set by the shell
    /// that starts it; `None` leaves the test's own.
    pub max_open_files: Option<u64>,
}

impl Default for DriverOpts {
    fn default() -> Self {
        DriverOpts {
            id: None,
            executor_timeout_ms: 2000,
            etcd: Vec::new(),
            cluster: None,
            lease_ttl_ms: None,
            extra_args: Vec::new(),
            env: Vec::new(),
            checkpoint_root: None,
            max_open_files: None,
        }
    }
}

/// Flags of one executor; `Default` suits tests.
#[derive(Debug, Clone)]
pub struct ExecutorOpts {
    pub id: Option<String>,
    pub slots: u32,
    pub heartbeat_ms: u64,
    pub extra_args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Default for ExecutorOpts {
    fn default() -> Self {
        ExecutorOpts {
            id: None,
            slots: 2,
            heartbeat_ms: 200,
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// The comma-separated gRPC addresses of `drivers`.
pub fn addrs(drivers: &[&Driver]) -> String {
    drivers
        .iter()
        .map(|d| d.addr())
        .collect::<Vec<_>>()
        .join(",")
}

pub struct Cluster {
    dir: tempfile::TempDir,
    processes: Mutex<Vec<Arc<Mutex<Inner>>>>,
    drivers: AtomicUsize,
    executors: AtomicUsize,
    files: AtomicUsize,
}

impl Cluster {
    /// An empty cluster in a fresh temporary directory named after `test`.
    pub fn new(test: &str) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sluice-{test}-"))
            .tempdir()
            .expect("create temp dir");
        for sub in ["checkpoint", "sinks", "logs", "specs"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("create cluster dir");
        }
        Cluster {
            dir,
            processes: Mutex::new(Vec::new()),
            drivers: AtomicUsize::new(0),
            executors: AtomicUsize::new(0),
            files: AtomicUsize::new(0),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn checkpoint_root(&self) -> PathBuf {
        self.root().join("checkpoint")
    }

    /// An absolute sink path for `name` (not created).
    pub fn sink_path(&self, name: &str) -> PathBuf {
        self.root().join("sinks").join(name)
    }

    pub fn log_path(&self, process: &str) -> PathBuf {
        self.root().join("logs").join(format!("{process}.log"))
    }

    /// Writes `text` to a new file under `specs/` and returns its path.
    pub fn write_spec(&self, text: &str) -> PathBuf {
        let n = self.files.fetch_add(1, Ordering::SeqCst);
        let path = self.root().join("specs").join(format!("spec-{n}.yaml"));
        std::fs::write(&path, text).expect("write spec file");
        path
    }

    /// Starts any program as a cluster process (for example `etcd`).
    pub fn spawn(&self, name: &str, program: &Path, args: Vec<String>) -> Process {
        self.spawn_with_env(name, program, args, Vec::new())
    }

    pub fn spawn_with_env(
        &self,
        name: &str,
        program: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Process {
        let process = Process::spawn(ProcessSpec {
            name: name.to_string(),
            program: program.to_path_buf(),
            args,
            env,
            cwd: self.root().to_path_buf(),
            log: self.log_path(name),
        });
        lock_vec(&self.processes).push(process.shared());
        process
    }

    /// Starts a standalone driver with test defaults on fresh ports. Does
    /// not wait: call [`Driver::wait_ready`].
    pub fn start_driver(&self) -> Driver {
        self.start_driver_with(DriverOpts::default())
    }

    pub fn start_driver_with(&self, opts: DriverOpts) -> Driver {
        let n = self.drivers.fetch_add(1, Ordering::SeqCst);
        let name = opts.id.clone().unwrap_or_else(|| format!("driver-{n}"));
        let (addr, http) = (free_addr(), free_addr());
        let mut args: Vec<String> = vec![
            "--listen".into(),
            addr.clone(),
            "--advertise".into(),
            addr.clone(),
            "--checkpoint-root".into(),
            opts.checkpoint_root
                .clone()
                .unwrap_or_else(|| self.checkpoint_root().display().to_string()),
            "--http".into(),
            http.clone(),
            "--executor-timeout-ms".into(),
            opts.executor_timeout_ms.to_string(),
            "--id".into(),
            name.clone(),
        ];
        if !opts.etcd.is_empty() {
            args.extend(["--etcd".into(), opts.etcd.join(",")]);
        }
        if let Some(c) = &opts.cluster {
            args.extend(["--cluster".into(), c.clone()]);
        }
        if let Some(ttl) = opts.lease_ttl_ms {
            args.extend(["--lease-ttl-ms".into(), ttl.to_string()]);
        }
        args.extend(opts.extra_args.iter().cloned());
        let (mut program, mut args) = node(DRIVER, args);
        if let Some(n) = opts.max_open_files {
            let script = format!("ulimit -n {n} && exec \"$0\" \"$@\"");
            let inner = std::iter::once(program.display().to_string()).chain(args);
            args = ["-c".to_string(), script]
                .into_iter()
                .chain(inner)
                .collect();
            program = "/bin/sh".into();
        }
        let process = self.spawn_with_env(&name, &program, args, opts.env);
        Driver::new(process, addr, http)
    }

    /// Starts a driver and waits for its `/readyz`.
    pub async fn start_ready_driver(&self) -> Driver {
        let driver = self.start_driver();
        driver.wait_ready(READY_TIMEOUT).await;
        driver
    }

    /// Starts an executor attached to `drivers` (comma-separated).
    pub fn start_executor(&self, drivers: &str) -> Executor {
        self.start_executor_with(drivers, ExecutorOpts::default())
    }

    pub fn start_executor_with(&self, drivers: &str, opts: ExecutorOpts) -> Executor {
        let n = self.executors.fetch_add(1, Ordering::SeqCst);
        let name = opts.id.clone().unwrap_or_else(|| format!("executor-{n}"));
        let mut args: Vec<String> = vec![
            "--driver".into(),
            drivers.to_string(),
            "--slots".into(),
            opts.slots.to_string(),
            "--heartbeat-ms".into(),
            opts.heartbeat_ms.to_string(),
            "--id".into(),
            name.clone(),
        ];
        args.extend(opts.extra_args.iter().cloned());
        let (program, args) = node(EXECUTOR, args);
        Executor::new(self.spawn_with_env(&name, &program, args, opts.env))
    }

    /// A gRPC client of `drivers` (comma-separated).
    pub fn client(&self, drivers: &str) -> Client {
        Client::new(drivers)
    }

    /// Runs `sluice --driver <drivers> <args..>` in the cluster directory.
    pub async fn cli(&self, drivers: &str, args: &[&str]) -> CliOutput {
        run_cli(drivers, args, self.root()).await
    }

    /// SIGKILLs and reaps every process started by this cluster.
    pub fn kill_all(&self) {
        for p in lock_vec(&self.processes).iter() {
            lock(p).kill_and_reap();
        }
    }

    /// The tail of every process log, with each process's exit status.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for p in lock_vec(&self.processes).iter() {
            let mut inner = lock(p);
            let status = inner.kill_and_reap();
            let spec = &inner.spec;
            out.push_str(&format!(
                "===== {} ({}; {:?}): last {lines} lines of {} =====\n{}\n",
                spec.name,
                spec.args.join(" "),
                status,
                spec.log.display(),
                crate::process::tail_lines(&spec.log, lines)
            ));
        }
        out
    }
}

fn lock_vec<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails(LOG_TAIL_LINES));
            if std::env::var_os("SLUICE_KEEP_TMP").is_some() {
                let path = std::mem::replace(
                    &mut self.dir,
                    tempfile::tempdir().expect("placeholder temp dir"),
                )
                .keep();
                eprintln!("kept the cluster directory {}", path.display());
            } else {
                eprintln!(
                    "cluster directory {} (set SLUICE_KEEP_TMP=1 to keep it)",
                    self.root().display()
                );
            }
        }
    }
}
