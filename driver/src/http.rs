//! The HTTP port: `/healthz` (the process is up), `/readyz` (200 only on
//! the leader, so that a Kubernetes Service routes to the leader alone),
//! `/metrics` (Prometheus text format) and the web UI (see [`crate::ui`]),
//! for the hosts and origins [`crate::origin`] lets through.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::conns::{Capped, Conn};
use crate::error::DriverError;
use crate::lifecycle::QueryState;
use crate::origin;
use crate::state::Driver;
use crate::ui::Ui;

/// How long a request's headers may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves until the UI's shutdown token is cancelled, at most `cap`
/// connections at once (see [`crate::conns`]). The UI's event streams end
/// on the same token, so the graceful shutdown does not wait for open
/// pages.
pub async fn serve(addr: SocketAddr, ui: Arc<Ui>, cap: usize) -> Result<(), DriverError> {
    let shutdown = ui.shutdown.clone();
    let probes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(ui.driver.clone());
    let hosts = Arc::new(ui.driver.config.http_hosts.clone());
    let app = probes
        .merge(crate::ui::routes(ui))
        .layer(axum::middleware::from_fn_with_state(hosts, origin::layer));
    let listener = Capped::new(tokio::net::TcpListener::bind(addr).await?, cap);
    let connections = TaskTracker::new();
    loop {
        let (conn, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        connections.spawn(connection(conn, peer, app.clone(), shutdown.clone()));
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Serves one connection, with the peer's address as `ConnectInfo`, until
/// it ends or `shutdown` (then gracefully: the request in flight ends).
async fn connection(conn: Conn, peer: SocketAddr, app: Router, shutdown: CancellationToken) {
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut app = app.clone();
        async move { app.call(req.map(axum::body::Body::new)).await }
    });
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let served = builder.serve_connection_with_upgrades(TokioIo::new(conn), service);
    tokio::pin!(served);
    let ended = tokio::select! {
        ended = served.as_mut() => ended,
        _ = shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}

async fn readyz(State(driver): State<Arc<Driver>>) -> impl IntoResponse {
    if driver.is_ready() {
        (StatusCode::OK, "leader\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not the leader\n")
    }
}

async fn metrics(State(driver): State<Arc<Driver>>) -> impl IntoResponse {
    let m = &driver.metrics;
    for s in QueryState::ALL {
        m.queries.with_label_values(&[s.as_str()]).set(0);
    }
    // Only the queries this driver leads now have a state.
    m.query_state.reset();
    m.lease_age_seconds.set(0.0);
    if let Ok(term) = driver.ready_term() {
        for q in term.queries.list() {
            let state = q.state().as_str();
            m.queries.with_label_values(&[state]).inc();
            m.query_state.with_label_values(&[&q.name, state]).set(1);
        }
        if let Some(lease) = term.leadership.lease() {
            m.lease_age_seconds.set(lease.age().as_secs_f64());
        }
    }
    let written = driver.checkpoint.bytes_written();
    m.checkpoint_bytes
        .inc_by(written.saturating_sub(m.checkpoint_bytes.get()));
    let content_type = [(
        axum::http::header::CONTENT_TYPE,
        "text/plain; version=0.0.4",
    )];
    match m.render() {
        Ok(text) => (StatusCode::OK, content_type, text),
        Err(e) => {
            tracing::error!(error = %e, "cannot render the metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                content_type,
                format!("{e}\n"),
            )
        }
    }
}
