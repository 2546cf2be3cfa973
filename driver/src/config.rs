//! Command-line flags (each also `SLUICE_<FLAG>` in the environment) and the
//! validated runtime configuration they turn into.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use sluice_common::storage::{StoreOptions, Stores};

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
    /// The most rows one task may hold: every batch is capped at this many
    /// rows per partition, whatever its spec says.
    #[arg(long, env = "SLUICE_MAX_ROWS_PER_TASK", default_value_t = 1_000_000)]
    pub max_rows_per_task: u64,
    /// The most bytes of source files one task reads: a larger file is
    /// split into byte ranges across tasks.
    #[arg(long, env = "SLUICE_MAX_BYTES_PER_TASK", default_value_t = 64 << 20)]
    pub max_bytes_per_task: u64,
    /// Committed batches kept in each query's offsets/ and commits/ logs.
    #[arg(long, env = "SLUICE_RETAIN_BATCHES", default_value_t = 100)]
    pub retain_batches: u64,
    /// etcd endpoints (URL[,URL...]). With them, drivers elect a leader and
    /// standbys take over; without, this driver runs standalone.
    #[arg(long, env = "SLUICE_ETCD", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// Cluster name: drivers campaign under /sluice/<cluster>/leader.
    #[arg(long, env = "SLUICE_CLUSTER", default_value = "default")]
    pub cluster: String,
    /// Leader lease TTL; etcd grants whole seconds, at least about 2 s.
    #[arg(long, env = "SLUICE_LEASE_TTL_MS", default_value_t = 3000)]
    pub lease_ttl_ms: u64,
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
    pub max_rows_per_task: u64,
    pub max_bytes_per_task: u64,
    pub retain_batches: u64,
    /// Batches between two compacted sink manifests (see
    /// `sluice_common::sink::manifest`); 0 turns compaction off.
    pub compact_interval: u64,
    /// Opens the checkpoint root, sources, tables and sinks.
    pub stores: Stores,
    /// `None`: standalone.
    pub election: Option<ElectionConfig>,
}

/// Leader election through etcd.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    pub endpoints: Vec<String>,
    pub cluster: String,
    pub lease_ttl: Duration,
}

impl ElectionConfig {
    /// The election name (key prefix) of this cluster.
    pub fn election_name(&self) -> String {
        format!("/sluice/{}/leader", self.cluster)
    }

    /// The lease TTL that etcd is asked for, in whole seconds (rounded up).
    pub fn ttl_secs(&self) -> i64 {
        self.lease_ttl.as_millis().div_ceil(1000).max(1) as i64
    }
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
        if cli.max_rows_per_task == 0 {
            return Err(DriverError::Config(
                "--max-rows-per-task must be at least 1".into(),
            ));
        }
        if cli.max_bytes_per_task == 0 {
            return Err(DriverError::Config(
                "--max-bytes-per-task must be at least 1".into(),
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
        let endpoints: Vec<String> = cli
            .etcd
            .iter()
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect();
        let election = if endpoints.is_empty() {
            None
        } else {
            let cluster = cli.cluster.clone();
            let valid = !cluster.is_empty()
                && cluster
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(DriverError::Config(format!(
                    "--cluster must match [A-Za-z0-9_-]+, got {cluster:?}"
                )));
            }
            if cli.lease_ttl_ms < 1000 {
                return Err(DriverError::Config(
                    "--lease-ttl-ms must be at least 1000".into(),
                ));
            }
            Some(ElectionConfig {
                endpoints,
                cluster,
                lease_ttl: Duration::from_millis(cli.lease_ttl_ms),
            })
        };
        Ok(DriverConfig {
            election,
            listen: cli.listen,
            advertise,
            checkpoint_root: cli.checkpoint_root,
            http: cli.http,
            executor_timeout: Duration::from_millis(cli.executor_timeout_ms),
            id: cli
                .id
                .unwrap_or_else(|| format!("driver-{}", uuid::Uuid::new_v4().simple())),
            max_task_attempts: cli.max_task_attempts,
            max_rows_per_task: cli.max_rows_per_task,
            max_bytes_per_task: cli.max_bytes_per_task,
            retain_batches: cli.retain_batches,
            compact_interval: sluice_common::sink::COMPACT_INTERVAL,
            stores: Stores::new(StoreOptions::from_env()),
        })
    }
}
