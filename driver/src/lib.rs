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
pub mod auth;
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
pub mod reload;
pub mod source;
pub mod state;
pub mod tls;
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

/// The largest request QueryService decodes: a little above the largest
/// valid spec ([`sluice_common::spec::MAX_SPEC_BYTES`]), so that a spec just
/// over it reaches the handler and gets `INVALID_ARGUMENT` naming the limit
/// and its size. Anything larger is refused by the codec with
/// `OUT_OF_RANGE` before it is buffered.
const MAX_REQUEST_BYTES: usize = 2 << 20;
/// The largest message an executor sends (a task result).
const MAX_CLUSTER_MESSAGE_BYTES: usize = 16 << 20;
/// Streams one connection may have open at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 256;

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
    let checkpoint = Checkpoint::open(&config.stores, &config.checkpoint_root)?;
    checkpoint.probe().await?;
    let driver = Arc::new(Driver::new(config, checkpoint, metrics::Metrics::new()?));
    let cancel = shutdown.child_token();
    let mut components: JoinSet<(&'static str, Result<(), DriverError>)> = JoinSet::new();

    let grpc = grpc_server(driver.clone(), cancel.clone(), &mut components).await?;
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
    components: &mut JoinSet<(&'static str, Result<(), DriverError>)>,
) -> Result<impl Future<Output = Result<(), DriverError>> + use<>, DriverError> {
    let listener = tokio::net::TcpListener::bind(driver.config.listen).await?;
    let driver_addr = listener.local_addr()?;
    let security = &driver.config.security;
    let keys = security.tls.as_ref().map(|t| t.watch()).transpose()?;
    let tokens = security
        .auth_tokens
        .as_ref()
        .map(|path| {
            let p = path.clone();
            reload::Watched::new("auth tokens", vec![path.clone()], move || {
                auth::tokens::Tokens::load(&p)
            })
        })
        .transpose()?;
    let client_ca = security.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    let auth = auth::layer::Auth::new(tokens.clone(), keys.clone(), client_ca);
    announce_security(&driver.config.security, auth.policy());
    let watched: Vec<Arc<dyn reload::Poll>> = keys
        .iter()
        .map(|k| k.clone() as Arc<dyn reload::Poll>)
        .chain(tokens.iter().map(|t| t.clone() as Arc<dyn reload::Poll>))
        .collect();
    let c = cancel.clone();
    components.spawn(async move { ("reload", reload::watch(watched, c).await) });

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
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .layer(auth)
        .add_service(health)
        .add_service(reflection)
        .add_service(
            QueryServiceServer::new(api::QueryApi {
                driver: driver.clone(),
            })
            .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            ClusterServiceServer::new(cluster::service::ClusterApi { driver })
                .max_decoding_message_size(MAX_CLUSTER_MESSAGE_BYTES),
        );
    info!(listen = %driver_addr, tls = keys.is_some(), "gRPC server listening");
    let serve: std::pin::Pin<Box<dyn Future<Output = Result<(), DriverError>> + Send>> = match keys
    {
        Some(keys) => {
            let config = tls::server_config(keys, client_ca);
            let (incoming, accept) = tls::incoming::serve(listener, config, cancel.clone());
            components.spawn(async move {
                accept.await;
                ("tls-accept", Ok(()))
            });
            Box::pin(async move {
                router
                    .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
                    .await?;
                Ok(())
            })
        }
        None => {
            // Small frames (a task, a result) go out at once: no Nagle delay.
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            Box::pin(async move {
                router
                    .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
                    .await?;
                Ok(())
            })
        }
    };
    Ok(serve)
}

/// Says at start what the gRPC port asks of its callers.
fn announce_security(security: &config::SecurityConfig, policy: auth::Policy) {
    match &security.tls {
        None => tracing::warn!(
            "the gRPC port is plaintext: anyone who reaches it can read and send everything; \
             set --tls-cert and --tls-key outside local use"
        ),
        Some(t) => info!(
            cert = %t.cert.display(),
            client_ca = ?t.client_ca.as_ref().map(|p| p.display().to_string()),
            "TLS on the gRPC port"
        ),
    }
    if !policy.tokens {
        tracing::warn!(
            "QueryService is open: no --auth-tokens, so any caller may submit and stop queries"
        );
    }
    if !policy.tokens && !policy.client_ca {
        tracing::warn!("executors are not authenticated: set --client-ca or --auth-tokens");
    }
}
