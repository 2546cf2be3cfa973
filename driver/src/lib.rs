//! The Sluice driver: the query API, executor membership, the scheduler and
//! the micro-batch runner.
//!
//! ```text
//!  run ─┬─ gRPC server (server.rs: QueryService, ClusterService, PeerService, health, reflection)
//!       ├─ HTTP server (http.rs: /healthz, /readyz, /metrics; ui/: the web UI)
//!       └─ leadership ─► Term { scheduler, query runners }
//! ```
//! Every task is owned: the servers by `run`, the rest by the term's
//! tracker. One `CancellationToken` shuts everything down, and a component
//! that fails cancels the rest.

pub mod api;
pub mod auth;
pub mod batch_loop;
pub mod cluster;
pub mod config;
pub mod conns;
pub mod error;
pub mod failpoint;
pub mod http;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod origin;
pub mod peer;
pub mod planner;
pub mod query;
pub mod recovery;
pub mod reload;
mod server;
pub mod sink;
pub mod source;
pub mod state;
pub mod tls;
pub mod ui;
pub mod watermark;

use std::sync::Arc;

pub use config::{Cli, DriverConfig};
pub use error::DriverError;
use sluice_common::checkpoint::Checkpoint;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::state::Driver;

/// Runs a driver until `shutdown` is cancelled or a component fails.
pub async fn run(config: DriverConfig, shutdown: CancellationToken) -> Result<(), DriverError> {
    if config.allowed_paths_default {
        info!(
            allowed_paths = %config.allowed_paths,
            checkpoint_root = %config.checkpoint_root,
            "no --allowed-paths: queries' sources, tables and sinks must be in the data directory, \
             the directory that holds the checkpoint root"
        );
    } else {
        info!(
            allowed_paths = %config.allowed_paths,
            "queries' sources, tables and sinks must be under --allowed-paths"
        );
    }
    info!(
        secrets_dir = ?config.secrets.dir(),
        secret_env_prefixes = ?config.secrets.env_prefixes(),
        "Kafka security files are read only from --secrets-dir, variables only with a prefix \
         of --secret-env-prefix (none: a spec that names one is refused)"
    );
    let checkpoint = Checkpoint::open(&config.stores, &config.checkpoint_root)?;
    checkpoint.probe().await?;
    let driver = Arc::new(Driver::new(config, checkpoint, metrics::Metrics::new()?));
    let cancel = shutdown.child_token();
    let mut components: JoinSet<(&'static str, Result<(), DriverError>)> = JoinSet::new();

    let tokens = server::tokens(&driver.config)?;
    let cap = conns::per_port(conns::raise_fd_limit());
    info!(
        connections_per_port = cap,
        "connection caps of the HTTP and plaintext gRPC ports"
    );
    let grpc = server::grpc(
        driver.clone(),
        tokens.clone(),
        cancel.clone(),
        &mut components,
        cap,
    )
    .await?;
    components.spawn(async move { ("grpc", grpc.await) });
    if let Some(addr) = driver.config.http {
        let ui = Arc::new(ui::Ui {
            driver: driver.clone(),
            tokens,
            sessions: ui::session::Sessions::default(),
            failures: Default::default(),
            shutdown: cancel.clone(),
        });
        components.spawn(async move { ("http", http::serve(addr, ui, cap).await) });
    }
    let (d, c) = (driver.clone(), cancel.clone());
    components.spawn(async move { ("leadership", leader::run(d, c).await) });

    let mut result = Ok(());
    while let Some(joined) = components.join_next().await {
        match joined {
            Ok((name, Err(e))) => {
                error!(component = name, error = %e, "driver component failed; shutting down");
                if result.is_ok() {
                    result = Err(e);
                }
                cancel.cancel();
            }
            Ok((name, Ok(()))) => {
                info!(component = name, "driver component stopped");
                cancel.cancel();
            }
            Err(e) => {
                error!(error = %e, "driver component panicked; shutting down");
                if result.is_ok() {
                    result = Err(DriverError::Internal(format!("a component panicked: {e}")));
                }
                cancel.cancel();
            }
        }
    }
    result
}
