//! Real `etcd` processes for the HA tests: one member or a small cluster on
//! free loopback ports, each with its data directory under the test's
//! cluster directory (`<tmp>/etcd/<name>`), so that a restart reuses the
//! same data and ports.
//!
//! The processes are started through [`Cluster::spawn`], so they are
//! SIGKILLed and reaped with the cluster (or their handle), even on panic.
//! The binary is `$SLUICE_ETCD_BIN`, else `etcd` on `PATH`, else
//! `/usr/bin/etcd` (Debian's `etcd-server`; `scripts/deps.sh` installs it).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::http;
use crate::ports::free_port;
use crate::process::Process;

/// How long a fresh or restarted etcd may take to become healthy.
pub const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The `etcd` binary. Panics with the fix when there is none.
pub fn etcd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ETCD_BIN") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    });
    let path = on_path.unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    if !path.is_file() {
        panic!(
            "etcd not found: run scripts/deps.sh (Debian package etcd-server) \
             or set SLUICE_ETCD_BIN"
        );
    }
    path
}

/// One etcd member.
#[derive(Debug)]
pub struct Etcd {
    pub(crate) process: Process,
    pub(crate) name: String,
    pub(crate) client_port: u16,
    pub(crate) data_dir: PathBuf,
    /// A plaintext `--listen-metrics-urls` port for `/health` and
    /// `/metrics`, when the client port is TLS.
    pub(crate) metrics_port: Option<u16>,
}

impl Etcd {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `http://127.0.0.1:<client port>` (`https://` when TLS), what
    /// `--etcd` takes.
    pub fn client_url(&self) -> String {
        let scheme = if self.metrics_port.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.client_addr())
    }

    /// Where `/health` and `/metrics` answer in plaintext.
    fn metrics_addr(&self) -> String {
        match self.metrics_port {
            Some(p) => format!("127.0.0.1:{p}"),
            None => self.client_addr(),
        }
    }

    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn process(&self) -> &Process {
        &self.process
    }

    /// True when `GET /health` on the client port reports healthy (the
    /// member is up and the cluster has a raft leader).
    pub async fn is_healthy(&self) -> bool {
        match http::get(&self.metrics_addr(), "/health", Duration::from_secs(1)).await {
            Ok((200, resp)) => String::from_utf8_lossy(http::body(&resp)).contains("true"),
            _ => false,
        }
    }

    /// Polls `/health` until healthy. Panics, with the log tail, on timeout
    /// or when the process exits first.
    pub async fn wait_healthy(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exit_status() {
                panic!(
                    "{} exited ({status}) before it was healthy; log tail:\n{}",
                    self.name,
                    self.process.log_tail(40)
                );
            }
            if self.is_healthy().await {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} not healthy after {timeout:?}; log tail:\n{}",
                    self.name,
                    self.process.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether this member is the raft leader now (`etcd_server_is_leader`
    /// in its `/metrics`); `None` when it does not answer.
    pub async fn is_raft_leader(&self) -> Option<bool> {
        let (code, resp) = http::get(&self.metrics_addr(), "/metrics", Duration::from_secs(2))
            .await
            .ok()?;
        if code != 200 {
            return None;
        }
        let text = String::from_utf8_lossy(http::body(&resp)).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("etcd_server_is_leader "))
            .map(|v| v.trim() == "1")
    }
}

impl Deref for Etcd {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

/// One or more etcd members forming one etcd cluster.
#[derive(Debug)]
pub struct EtcdCluster {
    pub(crate) members: Vec<Etcd>,
}

impl EtcdCluster {
    /// Starts `n` members (`etcd-0`, `etcd-1`, ...) as one new etcd
    /// cluster. Does not wait: see [`EtcdCluster::wait_healthy`].
    pub fn start(cluster: &Cluster, n: usize) -> EtcdCluster {
        assert!(n >= 1, "an etcd cluster needs a member");
        let bin = etcd_bin();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let name = |i: usize| format!("etcd-{i}");
        let initial = (0..n)
            .map(|i| format!("{}=http://127.0.0.1:{}", name(i), ports[i].1))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("sluice-test-{}-{}", std::process::id(), ports[0].0);
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, &(client_port, peer_port))| {
                let data_dir = cluster.root().join("etcd").join(name(i));
                std::fs::create_dir_all(&data_dir).expect("create etcd data dir");
                let client = format!("http://127.0.0.1:{client_port}");
                let peer = format!("http://127.0.0.1:{peer_port}");
                let args = member_args(&name(i), &data_dir, &client, &peer, &initial, &token);
                Etcd {
                    process: cluster.spawn(&name(i), &bin, args),
                    name: name(i),
                    client_port,
                    data_dir,
                    metrics_port: None,
                }
            })
            .collect();
        EtcdCluster { members }
    }

    /// Starts `n` members and waits until every one is healthy.
    pub async fn start_healthy(cluster: &Cluster, n: usize) -> EtcdCluster {
        let etcd = EtcdCluster::start(cluster, n);
        etcd.wait_healthy(ETCD_READY_TIMEOUT).await;
        etcd
    }

    pub fn members(&self) -> &[Etcd] {
        &self.members
    }

    pub fn member(&self, i: usize) -> &Etcd {
        &self.members[i]
    }

    /// The client URLs of every member, for `DriverOpts::etcd`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Etcd::client_url).collect()
    }

    /// Waits until every running member is healthy.
    pub async fn wait_healthy(&self, timeout: Duration) {
        for m in self.members.iter().filter(|m| m.is_running()) {
            m.wait_healthy(timeout).await;
        }
    }

    /// The index of the member that is the raft leader, polled until one
    /// member says so (panics after `timeout`).
    pub async fn raft_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            for (i, m) in self.members.iter().enumerate() {
                if m.is_running() && m.is_raft_leader().await == Some(true) {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no etcd member is the raft leader after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The flags of one member of a new cluster, serving clients on `client`
/// (an `http://` or `https://` URL) and its peers on `peer`.
pub(crate) fn member_args(
    name: &str,
    data_dir: &Path,
    client: &str,
    peer: &str,
    initial_cluster: &str,
    token: &str,
) -> Vec<String> {
    [
        "--name",
        name,
        "--data-dir",
        &data_dir.display().to_string(),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        initial_cluster,
        "--initial-cluster-state",
        "new",
        "--initial-cluster-token",
        token,
        "--heartbeat-interval",
        "100",
        "--election-timeout",
        "1000",
        "--logger",
        "zap",
        "--log-level",
        "info",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
