//! A real S3-compatible server for the object store tests: moto's
//! standalone server (`moto_server`, from the pinned venv `target/s3/venv`
//! that `scripts/deps.sh test` installs) on 127.0.0.1 and a free port.
//!
//! It is started through [`Cluster::spawn_with_env`], so it is SIGKILLed
//! and reaped with the cluster, even on panic. moto keeps objects in
//! memory. A durable server ([`S3::start_durable`]) records every request
//! (moto's recorder) and, after a SIGKILL, comes back with its objects:
//!
//! ```text
//!  clients ──► proxy 127.0.0.1:port ──► moto 127.0.0.1:backend
//!  kill():    proxy down (connections refused and reset), SIGKILL moto
//!  restart(): start moto, replay the recording, proxy up
//! ```
//!
//! Every process that talks to it gets [`S3::env`], the AWS conventions
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`, keys, `AWS_ALLOW_HTTP`); code in the
//! test process opens storage with [`S3::stores`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sluice_common::storage::{StoreOptions, Stores};

use crate::cluster::Cluster;
use crate::http;
use crate::ports::free_port;
use crate::process::Process;
use crate::proxy::Proxy;

/// How long moto may take to answer after it starts.
pub const S3_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The region every test client signs for.
pub const REGION: &str = "us-east-1";

/// `moto_server` in the pinned venv. Panics with the fix when missing.
pub fn moto_bin() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = dir.join("../target/s3/venv/bin/moto_server");
    if !bin.is_file() {
        panic!(
            "{} not found: run scripts/deps.sh test (it installs tests/requirements-s3.txt)",
            bin.display()
        );
    }
    bin
}

/// One moto server.
#[derive(Debug)]
pub struct S3 {
    process: Process,
    /// The port clients use.
    port: u16,
    /// The port moto listens on (`port` unless durable).
    backend: u16,
    /// Durable servers only.
    proxy: Option<Proxy>,
    /// Durable servers only: every request it applied, in order.
    recording: Option<PathBuf>,
}

impl S3 {
    /// Starts moto in `cluster` and waits until it answers. With `auth`,
    /// moto checks credentials on every request: none exist, so each
    /// request is refused (403), as a store refuses unknown keys.
    pub async fn start(cluster: &Cluster, name: &str, auth: bool) -> S3 {
        let port = free_port();
        let mut env = vec![("MOTO_PORT".to_string(), port.to_string())];
        if auth {
            env.push(("INITIAL_NO_AUTH_ACTION_COUNT".into(), "0".into()));
        }
        let process = cluster.spawn_with_env(name, &moto_bin(), args(port), env);
        let s3 = S3 {
            process,
            port,
            backend: port,
            proxy: None,
            recording: None,
        };
        s3.wait_ready().await;
        s3
    }

    /// Starts a server that keeps its objects across [`S3::kill`] and
    /// [`S3::restart`] (see the module docs).
    pub async fn start_durable(cluster: &Cluster, name: &str) -> S3 {
        let (port, backend) = (free_port(), free_port());
        let recording = recording_path(cluster, name);
        let env = vec![
            ("MOTO_PORT".to_string(), backend.to_string()),
            ("MOTO_ENABLE_RECORDING".into(), "True".into()),
            (
                "MOTO_RECORDER_FILEPATH".into(),
                recording.display().to_string(),
            ),
        ];
        // moto with its recorder serialized (see tests/moto/durable_server.py).
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("moto/durable_server.py");
        let mut argv = vec![script.display().to_string()];
        argv.extend(args(backend));
        let python = moto_bin().with_file_name("python");
        let process = cluster.spawn_with_env(name, &python, argv, env);
        let proxy = Proxy::new(port);
        proxy.up(backend).await;
        let s3 = S3 {
            process,
            port,
            backend,
            proxy: Some(proxy),
            recording: Some(recording),
        };
        s3.wait_ready().await;
        s3
    }

    /// Takes a durable server down: its port refuses connections and moto
    /// is SIGKILLed.
    pub fn kill(&self) {
        let proxy = self
            .proxy
            .as_ref()
            .expect("only a durable server is killed");
        proxy.down();
        self.process.kill();
    }

    /// Starts a killed durable server again with every object it had, then
    /// opens its port.
    pub async fn restart(&self) {
        let proxy = self.proxy.as_ref().expect("only a durable server restarts");
        let recording = self.recording.as_ref().expect("a durable server records");
        drop_partial_line(recording);
        self.process.restart();
        self.wait_ready_at(self.backend).await;
        let replay = "/moto-api/recorder/replay-recording";
        let backend = format!("127.0.0.1:{}", self.backend);
        let (code, resp) = http::request(&backend, "POST", replay, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("moto replay: {e}"));
        assert_eq!(code, 200, "moto replay: {}", String::from_utf8_lossy(&resp));
        proxy.up(self.backend).await;
    }

    async fn wait_ready(&self) {
        self.wait_ready_at(self.port).await;
    }

    async fn wait_ready_at(&self, port: u16) {
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + S3_READY_TIMEOUT;
        loop {
            if let Some(status) = self.process.exit_status() {
                panic!(
                    "moto exited ({status}) before it answered; log tail:\n{}",
                    self.process.log_tail(40)
                );
            }
            let path = "/moto-api/data.json";
            if let Ok((200, _)) = http::get(&addr, path, Duration::from_secs(2)).await {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "moto did not answer in {S3_READY_TIMEOUT:?}; log tail:\n{}",
                    self.process.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn process(&self) -> &Process {
        &self.process
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Creates `bucket` (at least 3 characters). Panics on failure.
    pub async fn create_bucket(&self, bucket: &str) {
        let (code, resp) = http::request(
            &self.addr(),
            "PUT",
            &format!("/{bucket}"),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("create bucket {bucket}: {e}"));
        assert_eq!(
            code,
            200,
            "create bucket {bucket}: {}",
            String::from_utf8_lossy(&resp)
        );
    }

    /// The environment of a process that uses this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ACCESS_KEY_ID", "sluice-test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "sluice-test-secret".to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Opens storage in the test process as the processes do.
    pub fn stores(&self) -> Stores {
        Stores::new(StoreOptions::from_pairs(self.env()))
    }
}

fn args(port: u16) -> Vec<String> {
    vec![
        "-H".to_string(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
    ]
}

fn recording_path(cluster: &Cluster, name: &str) -> PathBuf {
    cluster.root().join(format!("{name}.recording"))
}

/// Cuts a recording after its last complete line: a SIGKILL during an
/// append leaves a partial entry for a request that was never handled.
fn drop_partial_line(recording: &std::path::Path) {
    let Ok(bytes) = std::fs::read(recording) else {
        return;
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if complete < bytes.len() {
        std::fs::write(recording, &bytes[..complete]).expect("rewrite the recording");
    }
}
