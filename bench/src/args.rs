//! The flags of `sluice-bench` and the setup every scenario shares.

use std::time::Duration;

use anyhow::Context;

/// "Unbounded": the largest rate a spec accepts, so every row is available at once.
pub const UNBOUNDED_RPS: u64 = 1_000_000_000_000;
/// The longest any one scenario may run.
pub const RUN_LIMIT: Duration = Duration::from_secs(900);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Throughput,
    Overhead,
    Recovery,
    Failover,
    SqlStateless,
    Files,
    Partitions,
    Stateful,
    Windowed,
    StateRecovery,
    StateScale,
    Kafka,
    KafkaSink,
    Join,
    Nexmark,
    Delta,
    Iceberg,
}

/// Where the nexmark scenario's events come from (`--input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NexmarkInput {
    /// The nexmark source, generating as it reads.
    Nexmark,
    /// Parquet files, under `--files-dir`.
    Files,
    /// JSON lines files, under `--jsonl-dir`.
    Jsonl,
}

/// Where a scenario's checkpoint root and sink are (`--storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StorageKind {
    Local,
    S3,
}

impl StorageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Local => "local",
            StorageKind::S3 => "s3",
        }
    }
}

/// A file sink format a scenario writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SinkFormat {
    Jsonl,
    Csv,
    Parquet,
}

impl SinkFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkFormat::Jsonl => "jsonl",
            SinkFormat::Csv => "csv",
            SinkFormat::Parquet => "parquet",
        }
    }
}

/// The flags of `bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    pub scenario: Scenario,
    /// Print compact JSON on one line (the default is pretty-printed JSON).
    #[arg(long)]
    pub json: bool,
    /// throughput, sql-stateless, stateful, windowed: total rows (windowed:
    /// they span 30 s of event time); join: the rows of each stream (over
    /// 30 s of event time).
    #[arg(long, default_value_t = 20_000_000)]
    pub rows: u64,
    /// throughput, sql-stateless, stateful, windowed, join: the cap on rows
    /// per batch (join: per stream).
    #[arg(long, default_value_t = 4_000_000)]
    pub max_rows_per_batch: u64,
    /// overhead, partitions: the number of batches (default 200 overhead,
    /// 100 partitions); state-scale: the batches after the fill, each
    /// touching 1 % of the keys (default 40).
    #[arg(long)]
    pub batches: Option<u64>,
    /// sql-stateless: the sink format (default: jsonl, then parquet).
    #[arg(long, value_enum)]
    pub format: Option<SinkFormat>,
    /// files: how many jsonl input files.
    #[arg(long, default_value_t = 200)]
    pub files: u64,
    /// files: rows per input file.
    #[arg(long, default_value_t = 100_000)]
    pub rows_per_file: u64,
    /// recovery: how many kill/restart rounds.
    #[arg(long, default_value_t = 5)]
    pub iterations: u32,
    /// failover: how many SIGKILLs of the leader.
    #[arg(long, default_value_t = 10)]
    pub kills: u32,
    /// failover: how many SIGTERM handovers.
    #[arg(long, default_value_t = 10)]
    pub handovers: u32,
    /// Source partitions (default: 8 throughput, sql-stateless and the
    /// stateful scenarios, state-recovery and state-scale among them, 2
    /// overhead, 1024 partitions, 4 recovery and failover).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// windowed, state-recovery, state-scale: distinct group keys
    /// (default: 100000 windowed, 1000000 state-recovery, 10000000
    /// state-scale).
    #[arg(long)]
    pub keys: Option<u64>,
    /// windowed: the tumbling window's size, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub window_ms: u64,
    /// windowed, join: the watermark's delay behind the latest event time,
    /// in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub watermark_ms: u64,
    /// throughput, overhead, recovery: where the checkpoint root and the
    /// sink are: a temp dir, or a bucket on moto's S3 server (started and
    /// stopped by the benchmark).
    #[arg(long, value_enum, default_value_t = StorageKind::Local)]
    pub storage: StorageKind,
    /// `--storage s3`: moto's server (`scripts/deps.sh test` installs it).
    #[arg(
        long,
        env = "SLUICE_MOTO_BIN",
        default_value = "target/s3/venv/bin/moto_server"
    )]
    pub moto_bin: String,
    /// kafka: the records pre-loaded into the topic.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// kafka: the broker, tansu 0.6.0 (`scripts/deps.sh test` builds it).
    #[arg(
        long,
        env = "SLUICE_TANSU_BIN",
        default_value_t = default_tansu()
    )]
    pub tansu_bin: String,
    /// kafka-sink: the broker with transactions, noida-db 0.2.3
    /// (`scripts/deps.sh test` installs it into `target/kafka/venv`).
    #[arg(
        long,
        env = "SLUICE_NOIDA_BIN",
        default_value_t = default_noida()
    )]
    pub noida_bin: String,
    /// nexmark: the query, q0 .. q22, or all.
    #[arg(long, default_value = "all")]
    pub query: String,
    /// nexmark: events of all kinds (each table holds its share).
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// nexmark: the source's pace, and the rate of its event time.
    #[arg(long, default_value_t = 10_000_000)]
    pub events_per_second: u64,
    /// nexmark: read the events from the nexmark source, or from Parquet
    /// (`--files-dir`) or JSON lines (`--jsonl-dir`) files of them through
    /// the file source.
    #[arg(long, value_enum, default_value_t = NexmarkInput::Nexmark)]
    pub input: NexmarkInput,
    /// nexmark `--input files`: a directory with a folder of Parquet files
    /// per table (`bid/`, ...), written by `sluice nexmark generate` with
    /// the same `--events`; a missing folder is generated first.
    #[arg(long, default_value = "target/nexmark-files")]
    pub files_dir: std::path::PathBuf,
    /// nexmark `--input jsonl`: as `--files-dir`, of JSON lines files.
    #[arg(long, default_value = "target/nexmark-files-jsonl")]
    pub jsonl_dir: std::path::PathBuf,
    /// nexmark `--input files`: files per batch.
    #[arg(long, default_value_t = 2)]
    pub files_per_batch: u32,
    /// nexmark: the state a query and the executor may hold (each query's
    /// `max_state_bytes`, the executor's `--max-state-bytes`).
    #[arg(long, default_value_t = 6 << 30)]
    pub max_state_bytes: u64,
    /// nexmark: the memory each task's operators may hold (the executor's
    /// `--max-task-memory-bytes`); q9's and q19's reduce tasks hold more
    /// than the executor's default at 10 M events.
    #[arg(long, default_value_t = 4 << 30)]
    pub max_task_memory_bytes: u64,
    /// nexmark: the executor's `--state-memory-bytes`: half of it keeps
    /// states in memory, so that `--max-state-bytes` of state fit there.
    #[arg(long, default_value_t = 12 << 30)]
    pub state_memory_bytes: u64,
    /// overhead, failover: TLS on the driver's port, mutual TLS for the
    /// executors and a token for the client (certificates from `sluice
    /// certs init` in a temporary directory).
    #[arg(long)]
    pub tls: bool,
}

/// Where `scripts/deps.sh test` builds tansu.
fn default_tansu() -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    format!("{home}/.cache/sluice/tansu-0.6.0/bin/tansu")
}

/// Where `scripts/deps.sh test` installs noida-db: its broker binary in
/// the venv's `site-packages`.
fn default_noida() -> String {
    let lib = std::path::Path::new("target/kafka/venv/lib");
    let found = std::fs::read_dir(lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("site-packages/noida_db/noida-db"))
            .find(|p| p.is_file())
    });
    found.map_or_else(
        || "target/kafka/venv/lib/python3/site-packages/noida_db/noida-db".into(),
        |p| p.display().to_string(),
    )
}

/// The number of cores the benchmark can use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A temp dir with `checkpoints/` and `out/`; returns their paths.
pub fn workdir() -> anyhow::Result<(tempfile::TempDir, String, String)> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let mut paths = Vec::new();
    for sub in ["checkpoints", "out"] {
        let p = dir.path().join(sub);
        std::fs::create_dir_all(&p)?;
        paths.push(p.to_str().context("temp path is not UTF-8")?.to_string());
    }
    let out = paths.pop().unwrap_or_default();
    let root = paths.pop().unwrap_or_default();
    Ok((dir, root, out))
}

/// A run's result and its directory back; a run that failed (other than
/// by an interrupt) keeps the directory, which holds its logs, and names
/// it in the error.
pub fn kept_on_failure<T>(
    measured: anyhow::Result<T>,
    interrupted: bool,
    dir: tempfile::TempDir,
    what: &str,
) -> anyhow::Result<(T, tempfile::TempDir)> {
    match measured {
        Ok(m) => Ok((m, dir)),
        Err(e) if interrupted => Err(e),
        Err(e) => {
            let kept = dir.keep();
            Err(e.context(format!("{what} failed (logs kept in {})", kept.display())))
        }
    }
}
