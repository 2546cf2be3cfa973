//! In-process clusters for `local` and `bench`: a driver and executors run
//! as named tasks of this process under one `CancellationToken`, plus the
//! pieces both commands need (free ports, driver flags, signal handling).

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use sluice_common::storage::{AllowedPaths, Stores};
use sluice_executor::ExecutorConfig;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A free TCP address on 127.0.0.1 (bound, then released).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(l.local_addr()?)
}

/// The address clients use for a driver listening on `listen`.
pub fn advertise(listen: SocketAddr) -> String {
    if listen.ip().is_unspecified() {
        format!("127.0.0.1:{}", listen.port())
    } else {
        listen.to_string()
    }
}

/// `sluice driver` flags for an in-process or child driver. In-process, they
/// go through the driver's own flag parser, so its defaults and validation
/// apply.
pub fn driver_args(
    listen: SocketAddr,
    http: Option<SocketAddr>,
    root: &str,
    id: &str,
) -> Vec<String> {
    let mut args = vec![
        "--listen".to_string(),
        listen.to_string(),
        "--advertise".to_string(),
        advertise(listen),
        "--checkpoint-root".to_string(),
        root.to_string(),
        "--id".to_string(),
        id.to_string(),
    ];
    if let Some(h) = http {
        args.extend(["--http".to_string(), h.to_string()]);
    }
    args
}

/// Cancels `shutdown` on SIGINT (Ctrl-C) or SIGTERM. The task ends with the token.
pub fn spawn_signal_handler(shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(sluice_common::shutdown::cancel_on_signal(shutdown))
}

type Task = (String, JoinHandle<Result<(), String>>);

/// How long components get to stop after cancellation.
pub const GRACE: Duration = Duration::from_secs(10);

/// Drivers and executors running as tasks of this process. A component that
/// fails cancels the shared token, so everything stops together. Dropping
/// the cluster cancels it too.
pub struct InProcess {
    shutdown: CancellationToken,
    tasks: Vec<Task>,
    /// How every driver and executor here opens storage.
    stores: Stores,
    /// Where the executors' tasks may read and write; `None` does not
    /// confine them (the driver's own list applies at submit).
    allowed: Option<AllowedPaths>,
    /// The executors' TLS towards the driver; plaintext by default.
    executor_tls: sluice_common::tls::ClientTls,
    /// The state each executor may hold (`--max-state-bytes`).
    executor_state_bytes: u64,
    executor_task_memory_bytes: u64,
    executor_state: sluice_executor::config::LocalConfig,
    /// The Kafka secrets the executors may read: the last driver's
    /// (`--secrets-dir`, `--secret-env-prefix`, from its flags or
    /// environment).
    secrets: sluice_common::secrets::Secrets,
}

impl InProcess {
    /// A cluster whose nodes open storage with this process's environment.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self::with_stores(shutdown, crate::verify::stores())
    }

    /// A cluster whose nodes share `stores` (and its request counts).
    pub fn with_stores(shutdown: CancellationToken, stores: Stores) -> Self {
        InProcess {
            shutdown,
            tasks: Vec::new(),
            stores,
            allowed: None,
            executor_tls: Default::default(),
            executor_state_bytes: sluice_executor::config::DEFAULT_MAX_STATE_BYTES,
            executor_task_memory_bytes: sluice_executor::config::DEFAULT_MAX_TASK_MEMORY_BYTES,
            executor_state: Default::default(),
            secrets: Default::default(),
        }
    }

    /// Lets the executors started from now on hold `bytes` of state.
    pub fn executor_state_bytes(&mut self, bytes: u64) {
        self.executor_state_bytes = bytes;
    }

    /// Lets each task of the executors started from now on hold `bytes` in
    /// its operators (their `--max-task-memory-bytes`).
    pub fn executor_task_memory_bytes(&mut self, bytes: u64) {
        self.executor_task_memory_bytes = bytes;
    }

    /// Lets the executors started from now on keep `bytes` of state in
    /// memory (their `--state-memory-bytes`).
    pub fn executor_state_memory_bytes(&mut self, bytes: u64) {
        self.executor_state.memory_bytes = bytes;
    }

    /// Confines the executors started from now on to `allowed` (their
    /// `--allowed-paths`).
    pub fn confine(&mut self, allowed: AllowedPaths) {
        self.allowed = Some(allowed);
    }

    /// Starts a driver from `sluice driver` flags (see [`driver_args`]).
    pub fn spawn_driver(&mut self, args: &[String]) -> anyhow::Result<()> {
        let argv = std::iter::once("sluice driver".to_string()).chain(args.iter().cloned());
        let cli = sluice_driver::Cli::try_parse_from(argv).context("driver flags")?;
        let mut config = sluice_driver::DriverConfig::try_from(cli)
            .map_err(|e| anyhow::anyhow!("driver configuration: {e}"))?;
        config.stores = self.stores.clone();
        self.secrets = config.secrets.clone();
        let name = format!("driver {}", config.id);
        let token = self.shutdown.clone();
        self.spawn(name, async move { sluice_driver::run(config, token).await });
        Ok(())
    }

    /// Gives the executors spawned from now on these TLS settings.
    pub fn secure_executors(&mut self, tls: sluice_common::tls::ClientTls) {
        self.executor_tls = tls;
    }

    /// Starts an executor attached to `drivers`.
    pub fn spawn_executor(
        &mut self,
        drivers: Vec<String>,
        id: &str,
        slots: u32,
        heartbeat: Duration,
    ) {
        let config = ExecutorConfig {
            drivers,
            slots,
            heartbeat,
            id: id.to_string(),
            max_state_bytes: self.executor_state_bytes,
            state: self.executor_state.clone(),
            max_task_memory_bytes: self.executor_task_memory_bytes,
            stores: self.stores.clone(),
            tls: self.executor_tls.clone(),
            token: Default::default(),
            allowed_paths: self.allowed.clone(),
            secrets: self.secrets.clone(),
        };
        let token = self.shutdown.clone();
        self.spawn(format!("executor {id}"), async move {
            sluice_executor::run(config, token).await
        });
    }

    fn spawn<E, F>(&mut self, name: String, fut: F)
    where
        E: std::fmt::Display,
        F: Future<Output = Result<(), E>> + Send + 'static,
    {
        let token = self.shutdown.clone();
        let task_name = name.clone();
        let handle = tokio::spawn(async move {
            let res = fut.await.map_err(|e| e.to_string());
            if let Err(e) = &res {
                tracing::error!(task = %task_name, error = %e, "component failed; shutting down");
                token.cancel();
            }
            res
        });
        self.tasks.push((name, handle));
    }

    /// Runs `fut` unless the cluster stops first (a component failed, or the
    /// token was cancelled); then the cluster is shut down and the first
    /// component error is returned.
    pub async fn supervise<T>(
        &mut self,
        fut: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let token = self.shutdown.clone();
        tokio::select! {
            biased;
            _ = token.cancelled() => {
                let stopped = self.stop_all(GRACE).await;
                Err(stopped.err().unwrap_or_else(|| anyhow::anyhow!("interrupted")))
            }
            r = fut => r,
        }
    }

    /// Cancels every component and waits up to `grace` for each to end.
    /// Returns the first component error, if any.
    pub async fn shutdown(mut self, grace: Duration) -> anyhow::Result<()> {
        self.stop_all(grace).await
    }

    async fn stop_all(&mut self, grace: Duration) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let mut first: Option<anyhow::Error> = None;
        for (name, handle) in std::mem::take(&mut self.tasks) {
            let err = match tokio::time::timeout(grace, handle).await {
                Ok(Ok(Ok(()))) => None,
                Ok(Ok(Err(e))) => Some(anyhow::anyhow!("{name}: {e}")),
                Ok(Err(join)) => Some(anyhow::anyhow!("{name} panicked: {join}")),
                Err(_) => Some(anyhow::anyhow!("{name} did not stop within {grace:?}")),
            };
            if let Some(e) = err {
                tracing::warn!("{e:#}");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_args_advertise_a_reachable_address() {
        assert_eq!(advertise("0.0.0.0:7070".parse().unwrap()), "127.0.0.1:7070");
        let a = driver_args(
            "127.0.0.1:9".parse().unwrap(),
            "127.0.0.1:10".parse().ok(),
            "/r",
            "d",
        );
        assert_eq!(a[3], "127.0.0.1:9");
        assert_eq!(a[a.len() - 1], "127.0.0.1:10");
        let argv = std::iter::once("sluice driver".to_string()).chain(a);
        let cli = sluice_driver::Cli::try_parse_from(argv).unwrap();
        assert_eq!(cli.checkpoint_root, "/r");
    }
}
