//! Command-line flags (each also `SLUICE_<FLAG>` in the environment) and the
//! validated runtime configuration they turn into.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use sluice_common::secrets::Secrets;
use sluice_common::small_file::{self, Limits};
use sluice_common::storage::{AllowedPaths, StoreOptions, Stores};
use sluice_common::tls::ClientTls;

use crate::error::DriverError;

/// `sluice driver`: plans micro-batches, keeps checkpoints, schedules tasks.
#[derive(Debug, Clone, Parser)]
#[command(name = "sluice driver", version, about)]
pub struct Cli {
    /// Log lines as `text`, or as `json`: one object a line with the
    /// event's fields and every span's (query, batch, partition, attempt,
    /// epoch).
    #[arg(long, env = "SLUICE_LOG_FORMAT", default_value = "text")]
    pub log_format: sluice_common::telemetry::LogFormat,
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
    /// HTTP listen address: the web UI (http://ADDR/), /healthz, /readyz
    /// and /metrics.
    #[arg(long, env = "SLUICE_HTTP")]
    pub http: Option<SocketAddr>,
    /// The URL at which users reach this driver's web UI, which a standby's
    /// UI links to (default: http://, the --advertise host, the --http port).
    #[arg(long, env = "SLUICE_HTTP_ADVERTISE")]
    pub http_advertise: Option<String>,
    /// Host names the HTTP port answers to (NAME[,NAME...]), beside IP
    /// addresses, `localhost` and the hosts of --advertise and
    /// --http-advertise: a request for another name (a DNS rebinding
    /// page's) gets 421.
    #[arg(long, env = "SLUICE_HTTP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub http_allowed_hosts: Vec<String>,
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
    /// The most rows one batch plans, over all its tasks, unless the
    /// query's spec sets `max_rows_per_batch`; recorded in `offsets/N`.
    #[arg(long, env = "SLUICE_MAX_ROWS_PER_BATCH", default_value_t = 10_000_000)]
    pub max_rows_per_batch: u64,
    /// The most bytes of source files one batch takes (at least one file).
    #[arg(long, env = "SLUICE_MAX_BYTES_PER_BATCH", default_value_t = 1 << 30)]
    pub max_bytes_per_batch: u64,
    /// The most bytes of source files one task reads: a larger file is
    /// split into byte ranges across tasks.
    #[arg(long, env = "SLUICE_MAX_BYTES_PER_TASK", default_value_t = 64 << 20)]
    pub max_bytes_per_task: u64,
    /// The most bytes of sink files one task may write: a task that writes
    /// more fails its query, naming this cap (output far larger than the
    /// input, such as an `unnest` of a large range, fills disks).
    #[arg(long, env = "SLUICE_MAX_OUTPUT_BYTES_PER_TASK", default_value_t = 1 << 30)]
    pub max_output_bytes_per_task: u64,
    /// How long a query's SQL may take to plan at submit; a query that
    /// takes longer is refused with INVALID_ARGUMENT naming this budget.
    #[arg(long, env = "SLUICE_SQL_PLAN_BUDGET_MS", default_value_t = 10_000)]
    pub sql_plan_budget_ms: u64,
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
    /// A standby watches the leader's process: when its stream breaks and its
    /// port refuses connections, the standby revokes the leader's lease and
    /// takes over at once. Off: standbys wait for the lease to expire.
    #[arg(long, env = "SLUICE_FAST_FAILOVER", default_value_t = true, action = clap::ArgAction::Set)]
    pub fast_failover: bool,
    /// TLS certificate (PEM, with its chain) of the gRPC port; reloaded when
    /// the file changes. Without it the port is plaintext.
    #[arg(long, env = "SLUICE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "SLUICE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) of client certificates: executors must attach with a
    /// certificate it signed, and clients may use one instead of a token
    /// (the certificate's OU is the role). Needs --tls-cert.
    #[arg(long, env = "SLUICE_CLIENT_CA", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Token file (YAML: name, role, sha256 of each token). With it, every
    /// QueryService call needs a token or a client certificate with a role.
    #[arg(long, env = "SLUICE_AUTH_TOKENS")]
    pub auth_tokens: Option<PathBuf>,
    /// CA (PEM) of etcd's certificate: reach etcd over TLS (`https://`
    /// endpoints).
    #[arg(long, env = "SLUICE_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) for an etcd with --client-cert-auth.
    #[arg(long, env = "SLUICE_ETCD_CERT")]
    pub etcd_cert: Option<PathBuf>,
    /// The private key (PEM) of --etcd-cert.
    #[arg(long, env = "SLUICE_ETCD_KEY")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user, for an etcd with authentication enabled.
    #[arg(long, env = "SLUICE_ETCD_USER", requires = "etcd_password_file")]
    pub etcd_user: Option<String>,
    /// A file holding the password of --etcd-user.
    #[arg(long, env = "SLUICE_ETCD_PASSWORD_FILE", requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
    /// Where the sources, tables and sinks of a submitted query may be
    /// (PREFIX[,PREFIX...]): absolute paths, file:// URLs, or s3://, gs://
    /// and az:// URLs, compared by whole path segments once `.` and `..`
    /// are resolved; local paths are also checked with their symbolic
    /// links followed. A submit that names another place gets
    /// INVALID_ARGUMENT. Default: only the data directory, the directory
    /// that holds the checkpoint root (`--checkpoint-root
    /// /data/checkpoints` allows `/data`, `s3://bucket/ckpt` allows
    /// `s3://bucket/`). A sink never overlaps the checkpoint root or
    /// another query's sink, whatever this allows.
    #[arg(long, env = "SLUICE_ALLOWED_PATHS", value_delimiter = ',')]
    pub allowed_paths: Vec<String>,
    /// The directory of the files a spec's Kafka security settings may
    /// name (`ssl_ca`, `ssl_certificate`, `ssl_key`,
    /// `sasl_password_file`): relative to it, or absolute inside it, its
    /// symbolic links followed only within it. Give the executors the
    /// same. Default: none, and a spec that names such a file is refused.
    #[arg(long, env = "SLUICE_SECRETS_DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// The prefixes (PREFIX[,PREFIX...]) of the environment variables a
    /// spec's `sasl_password_env` may name; never one of Sluice's own
    /// (`SLUICE_`). Give the executors the same. Default: none, and a spec
    /// that names a variable is refused.
    #[arg(long, env = "SLUICE_SECRET_ENV_PREFIX", value_delimiter = ',')]
    pub secret_env_prefix: Vec<String>,
}

/// A password, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Transport security and authentication of the gRPC port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityConfig {
    /// `None`: plaintext.
    pub tls: Option<crate::tls::TlsFiles>,
    /// `None`: QueryService is open.
    pub auth_tokens: Option<PathBuf>,
}

/// The validated configuration of one driver.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub listen: SocketAddr,
    pub advertise: String,
    pub checkpoint_root: String,
    pub http: Option<SocketAddr>,
    /// The web UI's URL, published to the election (`None` without --http).
    pub http_advertise: Option<String>,
    /// The host names the HTTP port answers to.
    pub http_hosts: crate::origin::Hosts,
    pub executor_timeout: Duration,
    pub id: String,
    pub max_task_attempts: u32,
    pub max_rows_per_task: u64,
    pub max_bytes_per_task: u64,
    pub max_output_bytes_per_task: u64,
    /// A batch's default cap on rows, and its cap on bytes of files.
    pub max_rows_per_batch: u64,
    pub max_bytes_per_batch: u64,
    /// The planning budget of a query's SQL (`sluice_sql::guard`).
    pub sql_plan_budget: Duration,
    pub retain_batches: u64,
    /// Batches between two compacted sink manifests (see
    /// `sluice_common::sink::manifest`); 0 turns compaction off.
    pub compact_interval: u64,
    /// Opens the checkpoint root, sources, tables and sinks.
    pub stores: Stores,
    /// Where a query's sources, tables and sinks may be.
    pub allowed_paths: AllowedPaths,
    /// True when `allowed_paths` is the data directory, for want of
    /// `--allowed-paths`.
    pub allowed_paths_default: bool,
    /// Which files and variables a spec's Kafka settings may name.
    pub secrets: Secrets,
    /// `None`: standalone.
    pub election: Option<ElectionConfig>,
    pub security: SecurityConfig,
}

/// Leader election through etcd.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    pub endpoints: Vec<String>,
    pub cluster: String,
    pub lease_ttl: Duration,
    /// TLS towards etcd; plaintext without a CA.
    pub tls: ClientTls,
    /// etcd's authentication: user and password.
    pub user: Option<(String, Secret)>,
    /// Standbys detect a dead leader process and revoke its lease.
    pub fast_failover: bool,
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
        let (allowed_paths, allowed_paths_default) =
            allowed_paths(&cli.allowed_paths, &cli.checkpoint_root)?;
        let secrets = Secrets::new(cli.secrets_dir.as_deref(), &cli.secret_env_prefix)
            .map_err(DriverError::Config)?;
        let counts = [
            ("--executor-timeout-ms", cli.executor_timeout_ms),
            ("--max-task-attempts", u64::from(cli.max_task_attempts)),
            ("--max-rows-per-task", cli.max_rows_per_task),
            ("--max-bytes-per-task", cli.max_bytes_per_task),
            ("--max-rows-per-batch", cli.max_rows_per_batch),
            ("--max-bytes-per-batch", cli.max_bytes_per_batch),
            ("--max-output-bytes-per-task", cli.max_output_bytes_per_task),
            ("--sql-plan-budget-ms", cli.sql_plan_budget_ms),
            ("--retain-batches", cli.retain_batches),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(DriverError::Config(format!("{flag} must be at least 1")));
        }
        let advertise = match cli.advertise {
            Some(a) if !a.is_empty() => a,
            _ if cli.listen.ip().is_unspecified() => format!("127.0.0.1:{}", cli.listen.port()),
            _ => cli.listen.to_string(),
        };
        let http_advertise = http_advertise(cli.http, cli.http_advertise.as_deref(), &advertise)?;
        if let Some(bad) = cli
            .http_allowed_hosts
            .iter()
            .find(|h| h.contains(['/', ' ']) || h.trim().is_empty())
        {
            return Err(DriverError::Config(format!(
                "--http-allowed-hosts {bad:?}: give a host name, without a scheme or a path"
            )));
        }
        let http_hosts = crate::origin::Hosts::new(
            &advertise,
            http_advertise.as_deref(),
            &cli.http_allowed_hosts,
        );
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
            let tls = ClientTls::from_named_flags(
                ["--etcd-ca", "--etcd-cert", "--etcd-key"],
                cli.etcd_ca.clone(),
                cli.etcd_cert.clone(),
                cli.etcd_key.clone(),
            )
            .map_err(|e| DriverError::Config(e.to_string()))?;
            let scheme = tls.scheme();
            if let Some(bad) = endpoints
                .iter()
                .find(|e| !e.starts_with(&format!("{scheme}://")))
            {
                return Err(DriverError::Config(format!(
                    "--etcd {bad}: {}",
                    if tls.enabled() {
                        "with --etcd-ca every endpoint must be https://"
                    } else {
                        "an endpoint must be http:// (or https:// with --etcd-ca)"
                    }
                )));
            }
            let user = match (cli.etcd_user.clone(), &cli.etcd_password_file) {
                (Some(user), Some(file)) => {
                    let password = small_file::read_text(file, Limits::SECRET).map_err(|why| {
                        DriverError::Config(format!(
                            "--etcd-password-file {}: {why}",
                            file.display()
                        ))
                    })?;
                    let password = password.trim_end_matches(['\r', '\n']).to_string();
                    if password.is_empty() {
                        return Err(DriverError::Config(format!(
                            "--etcd-password-file {}: the file is empty",
                            file.display()
                        )));
                    }
                    Some((user, Secret(password)))
                }
                _ => None,
            };
            Some(ElectionConfig {
                endpoints,
                cluster,
                lease_ttl: Duration::from_millis(cli.lease_ttl_ms),
                tls,
                user,
                fast_failover: cli.fast_failover,
            })
        };
        let security = SecurityConfig {
            tls: cli
                .tls_cert
                .zip(cli.tls_key)
                .map(|(cert, key)| crate::tls::TlsFiles {
                    cert,
                    key,
                    client_ca: cli.client_ca,
                }),
            auth_tokens: cli.auth_tokens,
        };
        Ok(DriverConfig {
            election,
            security,
            listen: cli.listen,
            advertise,
            checkpoint_root: cli.checkpoint_root,
            http: cli.http,
            http_advertise,
            http_hosts,
            executor_timeout: Duration::from_millis(cli.executor_timeout_ms),
            id: cli
                .id
                .unwrap_or_else(|| format!("driver-{}", uuid::Uuid::new_v4().simple())),
            max_task_attempts: cli.max_task_attempts,
            max_rows_per_task: cli.max_rows_per_task,
            max_bytes_per_task: cli.max_bytes_per_task,
            sql_plan_budget: Duration::from_millis(cli.sql_plan_budget_ms),
            max_output_bytes_per_task: cli.max_output_bytes_per_task,
            max_rows_per_batch: cli.max_rows_per_batch,
            max_bytes_per_batch: cli.max_bytes_per_batch,
            retain_batches: cli.retain_batches,
            compact_interval: sluice_common::sink::COMPACT_INTERVAL,
            stores: Stores::new(StoreOptions::from_env()),
            allowed_paths,
            allowed_paths_default,
            secrets,
        })
    }
}

/// `--allowed-paths` (empty entries ignored), or the data directory of
/// `checkpoint_root` when none is given; true for the default.
fn allowed_paths(
    given: &[String],
    checkpoint_root: &str,
) -> Result<(AllowedPaths, bool), DriverError> {
    let given: Vec<&str> = given
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect();
    if given.is_empty() {
        let data_dir = AllowedPaths::data_dir_of(checkpoint_root)
            .map_err(|r| DriverError::Config(format!("--checkpoint-root: {r}")))?;
        return Ok((data_dir, true));
    }
    let allowed = AllowedPaths::parse(&given)
        .map_err(|r| DriverError::Config(format!("--allowed-paths: {r}")))?;
    Ok((allowed, false))
}

/// The UI's URL: `--http-advertise` as given, or `http://` with the host of
/// `--advertise` (or of `--http`, when it names an IP) and the `--http` port.
fn http_advertise(
    http: Option<SocketAddr>,
    given: Option<&str>,
    advertise: &str,
) -> Result<Option<String>, DriverError> {
    let Some(http) = http else {
        return Ok(None);
    };
    match given.map(str::trim).filter(|g| !g.is_empty()) {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            if url.contains(char::is_whitespace) {
                return Err(DriverError::Config(format!(
                    "--http-advertise {url:?} has a space in it"
                )));
            }
            Ok(Some(url.trim_end_matches('/').to_string()))
        }
        Some(url) => Err(DriverError::Config(format!(
            "--http-advertise {url:?} must start with http:// or https://"
        ))),
        None if http.ip().is_unspecified() => {
            let host = advertise.rsplit_once(':').map_or(advertise, |(h, _)| h);
            Ok(Some(format!("http://{host}:{}", http.port())))
        }
        None => Ok(Some(format!("http://{http}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<DriverConfig, String> {
        let argv = ["sluice driver", "--checkpoint-root", "/data/checkpoints"];
        let cli = Cli::try_parse_from(argv.iter().chain(args)).map_err(|e| e.to_string())?;
        DriverConfig::try_from(cli).map_err(|e| e.to_string())
    }

    #[test]
    fn allowed_paths_default_to_the_data_directory() {
        let c = parse(&[]).unwrap();
        assert!(c.allowed_paths_default);
        assert_eq!(c.allowed_paths.prefixes(), ["/data"]);
        let c = parse(&["--allowed-paths", "/in/,s3://b/out", "--allowed-paths=/x"]).unwrap();
        assert!(!c.allowed_paths_default);
        assert_eq!(c.allowed_paths.prefixes(), ["/in", "s3://b/out", "/x"]);
        assert!(
            parse(&["--allowed-paths", ""])
                .unwrap()
                .allowed_paths_default
        );
    }

    #[test]
    fn a_bad_allowed_path_names_the_flag() {
        for bad in ["rel/dir", "/ok,data", "ftp://host/x", "s3:///x", "file://x"] {
            let err = parse(&["--allowed-paths", bad]).unwrap_err();
            assert!(err.contains("--allowed-paths"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_secrets_policy_comes_from_its_flags() {
        assert_eq!(parse(&[]).unwrap().secrets, Secrets::default());
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let c = parse(&["--secrets-dir", d, "--secret-env-prefix", "KAFKA_,APP_"]).unwrap();
        assert_eq!(c.secrets.dir(), Some(dir.path()));
        assert_eq!(c.secrets.env_prefixes(), ["KAFKA_", "APP_"]);
        let err = parse(&["--secrets-dir", "/no/such/dir"]).unwrap_err();
        assert!(err.contains("--secrets-dir /no/such/dir"), "{err}");
        let err = parse(&["--secret-env-prefix", "SLUICE_"]).unwrap_err();
        assert!(err.contains("--secret-env-prefix SLUICE_"), "{err}");
    }

    #[test]
    fn a_password_file_that_is_a_device_is_refused_naming_the_flag() {
        let err = parse(&[
            "--etcd",
            "http://etcd:2379",
            "--etcd-user",
            "u",
            "--etcd-password-file",
            "/dev/zero",
        ])
        .unwrap_err();
        assert!(
            err.contains("--etcd-password-file /dev/zero: is a character device"),
            "{err}"
        );
    }

    #[test]
    fn the_ui_url_comes_from_the_flags() {
        assert_eq!(parse(&[]).unwrap().http_advertise, None);
        let c = parse(&[
            "--http",
            "0.0.0.0:7071",
            "--advertise",
            "driver-0.sluice:7070",
        ])
        .unwrap();
        assert_eq!(
            c.http_advertise.as_deref(),
            Some("http://driver-0.sluice:7071")
        );
        let c = parse(&["--http", "127.0.0.2:9000"]).unwrap();
        assert_eq!(c.http_advertise.as_deref(), Some("http://127.0.0.2:9000"));
        let c = parse(&[
            "--http",
            "0.0.0.0:1",
            "--http-advertise",
            "https://ui.example/",
        ])
        .unwrap();
        assert_eq!(c.http_advertise.as_deref(), Some("https://ui.example"));
        for bad in ["ui.example", "http://a b"] {
            let err = parse(&["--http", "0.0.0.0:1", "--http-advertise", bad]).unwrap_err();
            assert!(err.contains("--http-advertise"), "{bad}: {err}");
        }
    }
}
