//! The HTTP port: `/healthz` (the process is up), `/readyz` (200 only on
//! the leader, so that a Kubernetes Service routes to the leader alone),
//! `/metrics` (Prometheus text format) and the web UI (see [`crate::ui`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::error::DriverError;
use crate::lifecycle::QueryState;
use crate::state::Driver;
use crate::ui::Ui;

/// Serves until the UI's shutdown token is cancelled. The UI's event
/// streams end on the same token, so the graceful shutdown does not wait
/// for open pages.
pub async fn serve(addr: SocketAddr, ui: Arc<Ui>) -> Result<(), DriverError> {
    let shutdown = ui.shutdown.clone();
    let probes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(ui.driver.clone());
    let app = probes.merge(crate::ui::routes(ui));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
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
