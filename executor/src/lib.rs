//! The executor (`sluice executor`): attaches to the driver, heartbeats,
//! and runs the partition tasks it is given. The driver never dials an
//! executor.
//!
//! ```text
//!  run(config, shutdown)
//!    └─ connection::serve      pick a driver, follow leader hints, back off
//!         └─ session::run      one Attach stream: hello, heartbeats, dispatch
//!              └─ runner::Runner  queued and running tasks, slots, cancel
//!                   └─ task::execute   one task: generate, encode, write
//! ```
//!
//! `sluice local` and `sluice-bench` embed executors in-process through
//! [`run`]; `sluice executor` wraps it with flags and signals.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

mod cache;
pub mod config;
mod confine;
pub mod connection;
mod counter;
pub mod error;
mod input;
pub mod inspect;
mod late;
mod map;
mod operator;
mod output;
mod partition;
mod reduce;
mod runner;
pub mod session;
mod shuffle;
mod sink;
mod source;
mod stage;
mod state;
pub mod task;

pub use config::{Cli, ExecutorConfig};
/// The file sink's encoders, for tools that write files as the sink does
/// (`sluice nexmark generate`).
pub use sink::{Encoder as SinkEncoder, encoder as sink_encoder, extension as sink_extension};

/// The stack of the runtime's threads that run tasks: enough to run any
/// query that plans (see `sluice_sql::guard`).
pub const THREAD_STACK_BYTES: usize = sluice_sql::guard::RUN_STACK_BYTES;
pub use error::ExecutorError;

/// State shared by the sessions of one executor, across reconnects.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: ExecutorConfig,
    /// The highest driver epoch seen (Welcome or task). Only grows.
    pub(crate) max_epoch: AtomicU64,
    /// Fixed at start, larger for a process started later: of two
    /// processes with one id, the driver keeps the newer (see the driver's
    /// `cluster::identity`).
    pub(crate) incarnation: u64,
    /// One permit per slot.
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) sinks: Arc<crate::cache::Caches>,
    /// Where tasks run: threads of their own (see [`runner::TaskRuntime`]).
    pub(crate) tasks: runner::TaskRuntime,
}

/// Runs one executor until `shutdown` is cancelled, then drains (up to
/// [`session::DRAIN_TIMEOUT`]) and returns. A driver that is down or not the
/// leader never makes this return; only an invalid `config` does.
/// How long a shutdown waits for state snapshots being written.
const SNAPSHOT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn run(config: ExecutorConfig, shutdown: CancellationToken) -> Result<(), ExecutorError> {
    let config = config.validated()?;
    tracing::info!(
        executor = %config.id,
        slots = config.slots,
        heartbeat_ms = config.heartbeat.as_millis() as u64,
        drivers = ?config.drivers,
        "executor starting"
    );
    match &config.allowed_paths {
        Some(allowed) => tracing::info!(
            executor = %config.id,
            allowed_paths = %allowed,
            "tasks' sources, tables and sinks must be under --allowed-paths"
        ),
        None => tracing::warn!(
            executor = %config.id,
            "no --allowed-paths: this executor does not confine where tasks read and write; \
             the driver's --allowed-paths still applies to every submitted query"
        ),
    }
    tracing::info!(
        executor = %config.id,
        secrets_dir = ?config.secrets.dir(),
        secret_env_prefixes = ?config.secrets.env_prefixes(),
        "tasks' Kafka security files are read only from --secrets-dir, variables only with a \
         prefix of --secret-env-prefix"
    );
    let incarnation = new_incarnation();
    tracing::info!(executor = %config.id, incarnation, "incarnation");
    let shared = Arc::new(Shared {
        tasks: runner::TaskRuntime::new(config.slots)?,
        incarnation,
        slots: Arc::new(Semaphore::new(config.slots as usize)),
        max_epoch: AtomicU64::new(0),
        sinks: Arc::new(
            crate::cache::Caches::new(
                config.max_state_bytes,
                config.stores.clone(),
                config.allowed_paths.clone(),
            )
            .with_secrets(config.secrets.clone())
            .with_local_state(config.state.clone())
            .with_task_memory(config.max_task_memory_bytes),
        ),
        config,
    });
    let result = connection::serve(shared.clone(), shutdown).await;
    // Snapshots being written get a moment to finish; one cut short is
    // only a snapshot fewer (a later reload reads more deltas).
    let background = &shared.sinks.background;
    background.close();
    if tokio::time::timeout(SNAPSHOT_GRACE, background.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            running = background.len(),
            "state snapshots abandoned at shutdown"
        );
    }
    tracing::info!(executor = %shared.config.id, "executor stopped");
    result
}

/// The start time in milliseconds, shifted left 16 bits, with 16 random
/// bits below to order two processes started in the same millisecond.
fn new_incarnation() -> u64 {
    let ms = u64::try_from(sluice_common::time::now_ms()).unwrap_or(0);
    (ms << 16) | (uuid::Uuid::new_v4().as_u128() as u64 & 0xffff)
}
