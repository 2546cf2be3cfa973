//! Command-line flags (each also `SLUICE_<FLAG>` in the environment) and the
//! validated runtime configuration they turn into.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

use crate::error::DriverError;

/// `sluice-driver`: plans micro-batches, keeps checkpoints, schedules tasks.
#[derive(Debug, Clone, Parser)]
#[command(name = "sluice-driver", version, about)]
pub struct Cli {
    /// gRPC listen address.
    #[arg(long, env = "SLUICE_LISTEN", default_value = "0.0.0.0:7070")]
    pub listen: SocketAddr,
    /// The address executors and clients use to reach this driver
    /// (default: the listen address, with 127.0.0.1 for an unspecified IP).
    #[arg(long, env = "SLUICE_ADVERTISE")]
    pub advertise: Option<String>,
    /// Checkpoint root: an absolute path or a file:// URL on shared storage.
    #[arg(long, env = "SLUICE_CHECKPOINT_ROOT")]
    pub checkpoint_root: String,
    /// HTTP listen address for /healthz, /readyz and /metrics.
    #[arg(long, env = "SLUICE_HTTP")]
    pub http: Option<SocketAddr>,
    /// An executor with no heartbeat for this long is lost.
    #[arg(long, env = "SLUICE_EXECUTOR_TIMEOUT_MS", default_value_t = 5000)]
    pub executor_timeout_ms: u64,
    /// This driver's name in logs and in `sluice cluster` (default: a uuid).
    #[arg(long, env = "SLUICE_ID")]
    pub id: Option<String>,
    /// Attempts per task before its query fails.
    #[arg(long, env = "SLUICE_MAX_TASK_ATTEMPTS", default_value_t = 4)]
    pub max_task_attempts: u32,
    /// Committed batches kept in each query's offsets/ and commits/ logs.
    #[arg(long, env = "SLUICE_RETAIN_BATCHES", default_value_t = 100)]
    pub retain_batches: u64,
}

/// The validated configuration of one driver.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub listen: SocketAddr,
    pub advertise: String,
    pub checkpoint_root: String,
    pub http: Option<SocketAddr>,
    pub executor_timeout: Duration,
    pub id: String,
    pub max_task_attempts: u32,
    pub retain_batches: u64,
}

impl TryFrom<Cli> for DriverConfig {
    type Error = DriverError;

    fn try_from(cli: Cli) -> Result<Self, DriverError> {
        sluice_common::storage::validate_location(&cli.checkpoint_root)
            .map_err(|r| DriverError::Config(format!("--checkpoint-root: {r}")))?;
        if cli.executor_timeout_ms == 0 {
            return Err(DriverError::Config(
                "--executor-timeout-ms must be above 0".into(),
            ));
        }
        if cli.max_task_attempts == 0 {
            return Err(DriverError::Config(
                "--max-task-attempts must be at least 1".into(),
            ));
        }
        if cli.retain_batches == 0 {
            return Err(DriverError::Config(
                "--retain-batches must be at least 1".into(),
            ));
        }
        let advertise = match cli.advertise {
            Some(a) if !a.is_empty() => a,
            _ if cli.listen.ip().is_unspecified() => format!("127.0.0.1:{}", cli.listen.port()),
            _ => cli.listen.to_string(),
        };
        Ok(DriverConfig {
            listen: cli.listen,
            advertise,
            checkpoint_root: cli.checkpoint_root,
            http: cli.http,
            executor_timeout: Duration::from_millis(cli.executor_timeout_ms),
            id: cli
                .id
                .unwrap_or_else(|| format!("driver-{}", uuid::Uuid::new_v4().simple())),
            max_task_attempts: cli.max_task_attempts,
            retain_batches: cli.retain_batches,
        })
    }
}
