//! The Sluice driver: the query API, executor membership, the scheduler and
//! the micro-batch runner.
//!
//! ```text
//!  run ─┬─ gRPC server (QueryService, ClusterService, health, reflection)
//!       ├─ HTTP server (/healthz, /readyz, /metrics)
//!       └─ leadership ─► Term { scheduler, query runners }
//! ```
//! Every task is owned: the servers by `run`, the rest by the term's
//! tracker. One `CancellationToken` shuts everything down, and a component
//! that fails cancels the rest.

pub mod api;
pub mod cluster;
pub mod config;
pub mod error;
pub mod http;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod planner;
pub mod query;
pub mod recovery;
pub mod source;
pub mod state;
pub mod watermark;

use std::sync::Arc;

pub use config::{Cli, DriverConfig};
pub use error::DriverError;
use sluice_common::checkpoint::Checkpoint;
use sluice_proto::cluster_service_server::ClusterServiceServer;
use sluice_proto::query_service_server::QueryServiceServer;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::state::Driver;

/// The largest request QueryService decodes. Larger than any valid spec
/// ([`sluice_common::spec::MAX_SPEC_BYTES`]), so that an oversized spec
/// reaches the handler and gets `INVALID_ARGUMENT` naming the limit and its
/// size, rather than a transport error.
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// Runs a driver until `shutdown` is cancelled or a component fails.
pub async fn run(config: DriverConfig, shutdown: CancellationToken) -> Result<(), DriverError> {
    let checkpoint = Checkpoint::open(&config.stores, &config.checkpoint_root)?;
    checkpoint.probe().await?;
    let driver = Arc::new(Driver::new(config, checkpoint, metrics::Metrics::new()?));
    let cancel = shutdown.child_token();
    let mut components: JoinSet<(&'static str, Result<(), DriverError>)> = JoinSet::new();

    let grpc = grpc_server(driver.clone(), cancel.clone()).await?;
    components.spawn(async move { ("grpc", grpc.await) });
    if let Some(addr) = driver.config.http {
        let (d, c) = (driver.clone(), cancel.clone());
        components.spawn(async move { ("http", http::serve(addr, d, c).await) });
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

async fn grpc_server(
    driver: Arc<Driver>,
    cancel: CancellationToken,
) -> Result<impl Future<Output = Result<(), DriverError>>, DriverError> {
    let listener = tokio::net::TcpListener::bind(driver.config.listen).await?;
    let driver_addr = listener.local_addr()?;
    // Small frames (a task, a result) go out at once: no Nagle delay.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<QueryServiceServer<api::QueryApi>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| DriverError::Internal(format!("reflection: {e}")))?;
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(5)))
        .add_service(health)
        .add_service(reflection)
        .add_service(
            QueryServiceServer::new(api::QueryApi {
                driver: driver.clone(),
            })
            .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(ClusterServiceServer::new(cluster::service::ClusterApi {
            driver,
        }));
    info!(listen = %driver_addr, "gRPC server listening");
    Ok(async move {
        router
            .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
            .await?;
        Ok(())
    })
}
