//! Command-line flags (each also `SLUICE_<FLAG>` in the environment) and the
//! validated [`ExecutorConfig`] they turn into.
//!
//! ```text
//! argv / env ──clap──► Cli ──TryFrom (validate, normalise)──► ExecutorConfig ──► run()
//! ```
//!
//! Driver addresses are normalised to `http://host:port`, so the connection
//! layer never has to guess a scheme.

use std::time::Duration;

use std::path::PathBuf;

use clap::Parser;
use sluice_common::secrets::Secrets;
use sluice_common::storage::{AllowedPaths, StoreOptions, Stores};
use sluice_common::tls::{Bearer, ClientTls};

use crate::error::ExecutorError;
pub use crate::state::local::{DEFAULT_STATE_MEMORY_BYTES, LocalConfig};

/// The least `--state-memory-bytes`: the local store's cache and memtables.
pub const MIN_STATE_MEMORY_BYTES: u64 = 16 << 20;

/// `sluice executor`: attaches to the driver, heartbeats and runs tasks.
#[derive(Debug, Clone, Parser)]
#[command(name = "sluice executor", version, about)]
pub struct Cli {
    /// Log lines as `text`, or as `json`: one object a line with the
    /// event's fields and every span's (query, batch, partition, attempt,
    /// epoch).
    #[arg(long, env = "SLUICE_LOG_FORMAT", default_value = "text")]
    pub log_format: sluice_common::telemetry::LogFormat,
    /// Driver addresses, comma-separated (`host:port` or `http://host:port`).
    /// Standbys redirect to the leader.
    #[arg(long, env = "SLUICE_DRIVER", value_delimiter = ',', required = true)]
    pub driver: Vec<String>,
    /// Tasks run at once (default: the number of cores).
    #[arg(long, env = "SLUICE_SLOTS")]
    pub slots: Option<u32>,
    /// Interval between heartbeats, in milliseconds.
    #[arg(long, env = "SLUICE_HEARTBEAT_MS", default_value_t = 1000)]
    pub heartbeat_ms: u64,
    /// This executor's name (default: `executor-<uuid>`).
    #[arg(long, env = "SLUICE_ID")]
    pub id: Option<String>,
    /// The most bytes of stateful queries' state this executor holds, in
    /// memory and on local disk; a task whose state would pass it fails,
    /// naming the query.
    #[arg(long, env = "SLUICE_MAX_STATE_BYTES", default_value_t = DEFAULT_MAX_STATE_BYTES)]
    pub max_state_bytes: u64,
    /// The most bytes of state kept in memory; the rest is on local disk
    /// (--state-dir), a cache rebuilt from the checkpoint when lost.
    #[arg(long, env = "SLUICE_STATE_MEMORY_BYTES", default_value_t = DEFAULT_STATE_MEMORY_BYTES)]
    pub state_memory_bytes: u64,
    /// A directory of this executor's own for its local state files,
    /// emptied when it starts (default: one under the system's temporary
    /// directory).
    #[arg(long, env = "SLUICE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The most bytes one task's query operators (aggregations, joins) may
    /// hold; a task that needs more fails its query, naming this flag.
    #[arg(long, env = "SLUICE_MAX_TASK_MEMORY_BYTES", default_value_t = DEFAULT_MAX_TASK_MEMORY_BYTES)]
    pub max_task_memory_bytes: u64,
    /// CA (PEM) of the driver's certificate: connect over TLS (`https://`).
    #[arg(long, env = "SLUICE_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This executor's client certificate (PEM), for a driver with
    /// --client-ca.
    #[arg(long, env = "SLUICE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "SLUICE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// A token with the executor role, for a driver with --auth-tokens and
    /// no --client-ca.
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where the sources, tables and sinks of this executor's tasks may be
    /// (PREFIX[,PREFIX...]), checked again when each task runs, with local
    /// symbolic links followed: absolute paths, file:// URLs, or s3://,
    /// gs:// and az:// URLs, compared by whole path segments. A task that
    /// names another place fails its query. Default: this executor does
    /// not confine tasks (the driver's --allowed-paths still applies at
    /// submit).
    #[arg(long, env = "SLUICE_ALLOWED_PATHS", value_delimiter = ',')]
    pub allowed_paths: Vec<String>,
    /// The directory of the files a task's Kafka security settings may
    /// name, as the driver's --secrets-dir: a task that names another file
    /// fails its query. Default: none, and no such file is read.
    #[arg(long, env = "SLUICE_SECRETS_DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// The prefixes (PREFIX[,PREFIX...]) of the environment variables a
    /// task's `sasl_password_env` may name, as the driver's
    /// --secret-env-prefix. Default: none, and no variable is read.
    #[arg(long, env = "SLUICE_SECRET_ENV_PREFIX", value_delimiter = ',')]
    pub secret_env_prefix: Vec<String>,
}

/// `--max-state-bytes` unless set: 2 GiB.
pub const DEFAULT_MAX_STATE_BYTES: u64 = 2 << 30;

/// `--max-task-memory-bytes` unless set: 1 GiB.
pub const DEFAULT_MAX_TASK_MEMORY_BYTES: u64 = 1 << 30;

/// The validated configuration of one executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Driver addresses as `http://host:port`, tried in order.
    pub drivers: Vec<String>,
    /// Tasks run at once; at least 1.
    pub slots: u32,
    /// Interval between heartbeats; above zero.
    pub heartbeat: Duration,
    /// The name the driver knows this executor by.
    pub id: String,
    /// The most bytes of state held, in memory and on disk; at least 1.
    pub max_state_bytes: u64,
    /// Where the local state files go, and how much of them is in memory.
    pub state: LocalConfig,
    /// The most bytes one task's query operators may hold; at least 1.
    pub max_task_memory_bytes: u64,
    /// Opens sources, tables, sinks and state.
    pub stores: Stores,
    /// TLS towards the driver; plaintext by default.
    pub tls: ClientTls,
    /// The bearer token sent when attaching.
    pub token: Bearer,
    /// Where tasks may read and write; `None` does not confine.
    pub allowed_paths: Option<AllowedPaths>,
    /// Which files and variables a task's Kafka settings may name.
    pub secrets: Secrets,
}

impl TryFrom<Cli> for ExecutorConfig {
    type Error = ExecutorError;

    fn try_from(cli: Cli) -> Result<Self, ExecutorError> {
        let given: Vec<&str> = cli
            .allowed_paths
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .collect();
        let allowed_paths = match given.as_slice() {
            [] => None,
            given => Some(
                AllowedPaths::parse(given)
                    .map_err(|r| ExecutorError::Config(format!("--allowed-paths: {r}")))?,
            ),
        };
        let secrets = Secrets::new(cli.secrets_dir.as_deref(), &cli.secret_env_prefix)
            .map_err(ExecutorError::Config)?;
        let config = ExecutorConfig {
            allowed_paths,
            secrets,
            drivers: cli.driver,
            slots: cli.slots.unwrap_or_else(default_slots),
            heartbeat: Duration::from_millis(cli.heartbeat_ms),
            id: cli
                .id
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(default_id),
            max_state_bytes: cli.max_state_bytes,
            state: LocalConfig {
                dir: cli.state_dir,
                memory_bytes: cli.state_memory_bytes,
            },
            max_task_memory_bytes: cli.max_task_memory_bytes,
            stores: Stores::new(StoreOptions::from_env()),
            tls: ClientTls::from_flags(cli.tls_ca, cli.tls_cert, cli.tls_key)
                .map_err(|e| ExecutorError::Config(e.to_string()))?,
            token: Bearer::new(cli.token.as_deref())
                .map_err(|e| ExecutorError::Config(e.to_string()))?,
        };
        config.validated()
    }
}

impl ExecutorConfig {
    /// Checks every field and normalises the driver addresses. [`crate::run`]
    /// calls this too, for configurations built in code.
    pub fn validated(mut self) -> Result<Self, ExecutorError> {
        let mut drivers = Vec::with_capacity(self.drivers.len());
        for raw in &self.drivers {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let addr = normalize_address(raw, self.tls.scheme())
                .map_err(|reason| ExecutorError::Config(format!("--driver {raw:?}: {reason}")))?;
            drivers.push(addr);
        }
        if drivers.is_empty() {
            return Err(ExecutorError::Config(
                "--driver needs at least one address".into(),
            ));
        }
        if self.max_task_memory_bytes == 0 {
            return Err(ExecutorError::Config(
                "--max-task-memory-bytes must be at least 1".into(),
            ));
        }
        if self.state.memory_bytes < MIN_STATE_MEMORY_BYTES {
            return Err(ExecutorError::Config(format!(
                "--state-memory-bytes must be at least {MIN_STATE_MEMORY_BYTES} (16 MiB)"
            )));
        }
        if self.max_state_bytes == 0 {
            return Err(ExecutorError::Config(
                "--max-state-bytes must be at least 1".into(),
            ));
        }
        if self.slots == 0 {
            return Err(ExecutorError::Config("--slots must be at least 1".into()));
        }
        if self.heartbeat.is_zero() {
            return Err(ExecutorError::Config(
                "--heartbeat-ms must be above 0".into(),
            ));
        }
        if self.id.trim().is_empty() {
            return Err(ExecutorError::Config("--id must not be empty".into()));
        }
        self.drivers = drivers;
        Ok(self)
    }
}

/// `host:port` → `<scheme>://host:port`, where the scheme is `https` with
/// TLS and `http` without; a URL with that scheme is kept. Refuses any
/// other scheme, naming the one expected.
pub fn normalize_address(raw: &str, scheme: &str) -> Result<String, String> {
    let raw = raw.trim().trim_end_matches('/');
    let url = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("{scheme}://{raw}")
    };
    if !url.starts_with(&format!("{scheme}://")) {
        return Err(if scheme == "https" {
            "with --tls-ca the scheme must be https://".into()
        } else {
            "the scheme must be http:// (pass --tls-ca for https://)".into()
        });
    }
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err("missing host".into());
    }
    Ok(url)
}

fn default_slots() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

fn default_id() -> String {
    format!("executor-{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ExecutorConfig, String> {
        let mut argv = vec!["sluice executor"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        ExecutorConfig::try_from(cli).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_normalised_addresses() {
        let c = parse(&["--driver", "127.0.0.1:7070,http://d2:7071"]).unwrap();
        assert_eq!(c.drivers, vec!["http://127.0.0.1:7070", "http://d2:7071"]);
        assert!(c.slots >= 1);
        assert_eq!(c.heartbeat, Duration::from_millis(1000));
        assert!(c.id.starts_with("executor-"), "{}", c.id);
        let c = parse(&["--driver=d:1", "--slots=3", "--heartbeat-ms=250", "--id=e1"]).unwrap();
        assert_eq!(
            (c.slots, c.heartbeat.as_millis(), c.id.as_str()),
            (3, 250, "e1")
        );
    }

    #[test]
    fn invalid_values_name_the_flag() {
        assert!(
            parse(&["--driver", "d:1", "--slots", "0"])
                .unwrap_err()
                .contains("--slots")
        );
        let e = parse(&["--driver", "d:1", "--heartbeat-ms", "0"]).unwrap_err();
        assert!(e.contains("--heartbeat-ms"), "{e}");
        assert!(parse(&["--driver", ","]).unwrap_err().contains("--driver"));
        assert!(
            parse(&["--driver", "ftp://x:1"])
                .unwrap_err()
                .contains("--driver")
        );
        assert!(parse(&[]).is_err());
    }

    #[test]
    fn allowed_paths_confine_only_when_given() {
        assert_eq!(parse(&["--driver", "d:1"]).unwrap().allowed_paths, None);
        let c = parse(&["--driver=d:1", "--allowed-paths", "/data/,s3://b/x"]).unwrap();
        let prefixes = c.allowed_paths.map(|a| a.prefixes());
        assert_eq!(prefixes.unwrap(), ["/data", "s3://b/x"]);
        for bad in ["data", "/ok,rel", "http://h/x", "s3://"] {
            let e = parse(&["--driver=d:1", "--allowed-paths", bad]).unwrap_err();
            assert!(e.contains("--allowed-paths"), "{bad}: {e}");
        }
    }

    #[test]
    fn address_forms() {
        assert_eq!(normalize_address("h:1", "http").unwrap(), "http://h:1");
        assert_eq!(
            normalize_address("http://h:1/", "http").unwrap(),
            "http://h:1"
        );
        assert!(normalize_address("https://h:1", "http").is_err());
        assert_eq!(normalize_address("h:1", "https").unwrap(), "https://h:1");
        assert!(normalize_address("http://h:1", "https").is_err());
        assert!(normalize_address("a b", "http").is_err());
        assert!(normalize_address("grpc://h:1", "http").is_err());
    }
}
