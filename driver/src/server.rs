//! The driver's gRPC port: its services (QueryService for users,
//! ClusterService for executors, PeerService for standby drivers, health,
//! reflection), limits, TLS and auth layer.
//!
//! ```text
//!  TcpListener ─┬─ plaintext: conns::incoming (capped, no Nagle) ─┐
//!               └─ TLS: tls::incoming (handshake, peer certs) ┴─► Auth layer ─► services
//! ```
//! One router serves both: only the stream of accepted connections differs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sluice_proto::cluster_service_server::ClusterServiceServer;
use sluice_proto::peer_service_server::PeerServiceServer;
use sluice_proto::query_service_server::QueryServiceServer;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::state::Driver;
use crate::{DriverError, api, auth, cluster, config, peer, reload, tls};

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

/// `--auth-tokens`, loaded and then reloaded as the file changes: shared by
/// the gRPC port and the web UI.
pub(crate) fn tokens(
    config: &config::DriverConfig,
) -> Result<Option<Arc<reload::Watched<auth::tokens::Tokens>>>, DriverError> {
    config
        .security
        .auth_tokens
        .as_ref()
        .map(|path| {
            let p = path.clone();
            reload::Watched::new("auth tokens", vec![path.clone()], move || {
                auth::tokens::Tokens::load(&p)
            })
        })
        .transpose()
}

/// Binds the gRPC port and returns the future that serves it. The TLS
/// accept loop and the reload watcher join `components`.
pub(crate) async fn grpc(
    driver: Arc<Driver>,
    tokens: Option<Arc<reload::Watched<auth::tokens::Tokens>>>,
    cancel: CancellationToken,
    components: &mut JoinSet<(&'static str, Result<(), DriverError>)>,
    cap: usize,
) -> Result<impl Future<Output = Result<(), DriverError>> + use<>, DriverError> {
    let listener = tokio::net::TcpListener::bind(driver.config.listen).await?;
    let driver_addr = listener.local_addr()?;
    let security = &driver.config.security;
    let keys = security.tls.as_ref().map(|t| t.watch()).transpose()?;
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
        .add_service(PeerServiceServer::new(peer::PeerApi {
            driver: driver.clone(),
        }))
        .add_service(
            ClusterServiceServer::new(cluster::service::ClusterApi { driver })
                .max_decoding_message_size(MAX_CLUSTER_MESSAGE_BYTES),
        );
    info!(listen = %driver_addr, tls = keys.is_some(), "gRPC server listening");
    let serve: Pin<Box<dyn Future<Output = Result<(), DriverError>> + Send>> = match keys {
        Some(keys) => {
            let config = tls::server_config(keys, client_ca);
            let (incoming, accept) = tls::incoming::serve(listener, config, cancel.clone());
            components.spawn(async move {
                accept.await;
                ("tls-accept", Ok(()))
            });
            Box::pin(serve(router, incoming, cancel))
        }
        None => {
            // At most `cap` connections, each with a deadline for its first
            // bytes, and no Nagle delay (see `conns`).
            let incoming = crate::conns::incoming(crate::conns::Capped::new(listener, cap));
            Box::pin(serve(router, incoming, cancel))
        }
    };
    Ok(serve)
}

/// The router both kinds of connection are served by.
type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<auth::layer::Auth, tower::layer::util::Identity>,
>;

/// Serves `router` on `incoming` until `cancel`.
async fn serve<I, IO, IE>(
    router: Router,
    incoming: I,
    cancel: CancellationToken,
) -> Result<(), DriverError>
where
    I: tokio_stream::Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    router
        .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
        .await?;
    Ok(())
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
