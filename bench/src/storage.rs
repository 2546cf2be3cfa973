//! Where a scenario keeps its checkpoint root and its sink (`--storage`):
//!
//! ```text
//!  local   <tmp>/checkpoints, <tmp>/out
//!  s3      moto's S3 server (a child process on 127.0.0.1, a free port),
//!          bucket `bench`: s3://bench/checkpoints, s3://bench/out
//! ```
//!
//! Every node of the scenario opens storage through [`BenchStorage::stores`],
//! so its request counts are the scenario's. moto is a slow Python server:
//! figures on it are a floor for S3, not a target.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_common::checkpoint::{Checkpoint, QueryCheckpoint};
use sluice_common::storage::{StoreOptions, Stores};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::args::{StorageKind, workdir};
use super::child::ChildProcess;
use sluice_cli::inproc;

const BUCKET: &str = "bench";
const MOTO_READY: Duration = Duration::from_secs(60);

/// A scenario's storage; dropping it stops moto and removes the temp dir.
pub struct BenchStorage {
    pub dir: tempfile::TempDir,
    pub root: String,
    pub out: String,
    /// Opens storage for every node, and counts their requests.
    pub stores: Stores,
    /// The environment a child process needs to reach the storage.
    pub env: Vec<(String, String)>,
    pub kind: StorageKind,
    _moto: Option<ChildProcess>,
}

impl BenchStorage {
    pub async fn prepare(kind: StorageKind, moto_bin: &str) -> anyhow::Result<Self> {
        let (dir, root, out) = workdir()?;
        match kind {
            StorageKind::Local => Ok(BenchStorage {
                dir,
                root,
                out,
                stores: sluice_cli::verify::stores(),
                env: Vec::new(),
                kind,
                _moto: None,
            }),
            StorageKind::S3 => {
                let bin = PathBuf::from(moto_bin);
                anyhow::ensure!(
                    bin.is_file(),
                    "--storage s3 needs moto's server at {moto_bin} (scripts/deps.sh test \
                     installs it; or set --moto-bin)"
                );
                let addr = inproc::free_addr()?;
                let args = vec![
                    "-H".into(),
                    "127.0.0.1".into(),
                    "-p".into(),
                    addr.port().to_string(),
                ];
                let mut moto = ChildProcess::new(bin, args, dir.path().join("moto.log"));
                moto.start()?;
                let addr = addr.to_string();
                wait_ready(&addr).await?;
                http(&addr, "PUT", &format!("/{BUCKET}")).await?;
                let env: Vec<(String, String)> = [
                    ("AWS_ENDPOINT_URL", format!("http://{addr}")),
                    ("AWS_REGION", "us-east-1".into()),
                    ("AWS_ACCESS_KEY_ID", "bench".into()),
                    ("AWS_SECRET_ACCESS_KEY", "bench".into()),
                    ("AWS_ALLOW_HTTP", "true".into()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
                Ok(BenchStorage {
                    dir,
                    root: format!("s3://{BUCKET}/checkpoints"),
                    out: format!("s3://{BUCKET}/out"),
                    stores: Stores::new(StoreOptions::from_pairs(env.clone())),
                    env,
                    kind,
                    _moto: Some(moto),
                })
            }
        }
    }

    /// `query`'s checkpoint, read through the benchmark's stores.
    pub fn checkpoint(&self, query: &str) -> anyhow::Result<QueryCheckpoint> {
        Ok(Checkpoint::open(&self.stores, &self.root)?.query(query))
    }
}

async fn wait_ready(addr: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + MOTO_READY;
    loop {
        if http(addr, "GET", "/moto-api/data.json").await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "moto did not answer on {addr} within {MOTO_READY:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One request with no body; an error unless the reply is 200.
async fn http(addr: &str, method: &str, path: &str) -> anyhow::Result<()> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        anyhow::Ok(reply)
    };
    let reply = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .context("no reply in 10 s")??;
    let head = String::from_utf8_lossy(&reply[..reply.len().min(64)]).into_owned();
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{method} {path}: {head}"
    );
    Ok(())
}
