//! The web UI on the `--http` port: pages compiled into the binary, a JSON
//! API they read, and a server-sent event stream that keeps them live.
//!
//! ```text
//!  browser ─ GET /             index.html, app.js, charts.js, style.css, uPlot (static)
//!          ─ POST /ui/api/login            token ─► session id in a cookie (session.rs)
//!          ─ GET /ui/events[/Q]            SSE: overview every second; query Q's
//!                                          detail and its new progress records
//!          ─ GET /ui/api/overview | /ui/api/queries/Q
//!          ─ POST /ui/api/queries/Q/stop   admin
//!          ─ PUT|GET /debug/failpoints/P   admin; debug builds only (failpoints.rs)
//! ```
//! Every data call passes [`session::access`]. A standby serves the pages
//! too: its overview says it is a standby and names the leader's UI.

mod assets;
mod events;
#[cfg(debug_assertions)]
mod failpoints;
pub mod session;
pub mod view;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use crate::auth::layer::SLOW_DOWN;
use crate::auth::tokens::{Tokens, hash_bytes};
use crate::auth::{Role, TokenCheck};
use crate::error::DriverError;
use crate::query;
use crate::reload::Watched;
use crate::state::{Driver, Role as DriverRole};
use session::Credential;

/// What the UI's handlers share.
pub struct Ui {
    pub driver: Arc<Driver>,
    /// `--auth-tokens`, reloaded as the file changes.
    pub tokens: Option<Arc<Watched<Tokens>>>,
    /// The UI's sign-in sessions.
    pub sessions: session::Sessions,
    /// Failed sign-ins by peer: a peer past its budget waits.
    pub failures: crate::auth::failures::Failures,
    /// Ends the event streams, so that the server's graceful shutdown does
    /// not wait for open pages.
    pub shutdown: CancellationToken,
}

impl Ui {
    /// The caller's role, if it may make a call that needs `need`.
    fn access(&self, headers: &HeaderMap, need: Role) -> Result<Role, DriverError> {
        let check = match (&self.tokens, session::credential(headers)) {
            (Some(tokens), Some(Credential::Bearer(t))) => tokens.get().check(t),
            (Some(tokens), Some(Credential::Session(id))) => {
                match self.sessions.token(id, Instant::now()) {
                    Some(hash) => tokens.get().check_hash(&hash),
                    None => TokenCheck::Unknown,
                }
            }
            _ => TokenCheck::Absent,
        };
        session::access(self.tokens.is_some(), &check, need)
    }

    /// The overview for a caller with `access`.
    pub async fn overview(&self, access: Role) -> view::Overview {
        let d = &self.driver;
        let mut o = view::Overview {
            driver_id: d.config.id.clone(),
            role: "starting",
            epoch: None,
            leader: None,
            leader_ui: None,
            ui: d.config.http_advertise.clone(),
            standbys: Vec::new(),
            executors: Vec::new(),
            queries: Vec::new(),
            access: access.as_str(),
            now_ms: sluice_common::time::now_ms(),
        };
        match d.role() {
            DriverRole::Standby { leader, leader_ui } => {
                o.role = "standby";
                o.leader = leader;
                o.leader_ui = leader_ui;
            }
            DriverRole::Starting => {}
            DriverRole::Leader(_) => {
                let Ok(term) = d.ready_term() else {
                    return o;
                };
                o.role = "leader";
                o.epoch = Some(term.epoch);
                o.leader = Some(d.config.advertise.clone());
                o.leader_ui = d.config.http_advertise.clone();
                o.executors = term
                    .scheduler
                    .executors()
                    .await
                    .iter()
                    .map(Into::into)
                    .collect();
                o.standbys = match term.leadership.standbys(&d.config.advertise).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the standby drivers");
                        Vec::new()
                    }
                };
                let mut queries: Vec<_> = term.queries.list();
                queries.sort_by(|a, b| a.name.cmp(&b.name));
                o.queries = queries
                    .iter()
                    .map(|q| view::summary(q, q.last_progress().as_ref()))
                    .collect();
            }
        }
        o
    }
}

/// The UI's routes, for the HTTP server to merge.
pub fn routes(ui: Arc<Ui>) -> Router {
    let router = assets::routes()
        .route("/ui/api/session", get(session_info))
        .route("/ui/api/login", post(login))
        .route("/ui/api/logout", post(logout))
        .route("/ui/api/overview", get(overview))
        .route("/ui/api/queries/{name}", get(query_detail))
        .route("/ui/api/queries/{name}/stop", post(stop))
        .route("/ui/events", get(events::overview))
        .route("/ui/events/{name}", get(events::query));
    #[cfg(debug_assertions)]
    let router = failpoints::routes(router);
    router.with_state(ui)
}

/// The UI's one conversion of an error into an HTTP answer: a status, and
/// the message with whether a retry may help.
fn error_response(e: DriverError) -> Response {
    let status = match &e {
        DriverError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        DriverError::PermissionDenied(_) => StatusCode::FORBIDDEN,
        DriverError::NotFound(_) => StatusCode::NOT_FOUND,
        DriverError::Invalid(_) => StatusCode::BAD_REQUEST,
        e if e.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = serde_json::json!({ "error": e.to_string(), "retryable": e.is_retryable() });
    (status, Json(body)).into_response()
}

/// Whether tokens are needed, and the caller's role if it has one.
async fn session_info(State(ui): State<Arc<Ui>>, headers: HeaderMap) -> Response {
    let role = ui.access(&headers, Role::Viewer).ok().map(Role::as_str);
    Json(serde_json::json!({ "auth": ui.tokens.is_some(), "role": role })).into_response()
}

/// Takes a token (the body) and opens a session for it: the cookie holds
/// the session's id.
async fn login(
    State(ui): State<Arc<Ui>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: String,
) -> Response {
    let (peer, now) = (Some(peer.ip()), Instant::now());
    if !ui.failures.admits(peer, now) {
        let body = Json(serde_json::json!({ "error": SLOW_DOWN, "retryable": true }));
        return (StatusCode::TOO_MANY_REQUESTS, body).into_response();
    }
    let token = body.trim();
    let check = match &ui.tokens {
        Some(tokens) => tokens.get().check(token),
        None => TokenCheck::Absent,
    };
    let cookie = session::access(ui.tokens.is_some(), &check, Role::Viewer).map(|_| {
        let id = ui.sessions.open(hash_bytes(token), Instant::now());
        session::login_cookie(&id)
    });
    match cookie {
        Ok(cookie) => {
            let role = match check {
                TokenCheck::Known { role, .. } => role,
                _ => Role::Admin,
            };
            tracing::info!(role = role.as_str(), "UI sign-in");
            let body = Json(serde_json::json!({ "role": role.as_str() }));
            ([(SET_COOKIE, cookie)], body).into_response()
        }
        Err(e) => {
            if matches!(e, DriverError::Unauthenticated(_)) {
                ui.failures.failed(peer, now, "UI sign-in");
            }
            error_response(e)
        }
    }
}

/// Ends the caller's session.
async fn logout(State(ui): State<Arc<Ui>>, headers: HeaderMap) -> Response {
    if let Some(Credential::Session(id)) = session::credential(&headers) {
        ui.sessions.close(id);
    }
    (
        [(SET_COOKIE, session::logout_cookie())],
        StatusCode::NO_CONTENT,
    )
        .into_response()
}

async fn overview(State(ui): State<Arc<Ui>>, headers: HeaderMap) -> Response {
    match ui.access(&headers, Role::Viewer) {
        Ok(role) => Json(ui.overview(role).await).into_response(),
        Err(e) => error_response(e),
    }
}

/// A query's detail with all its retained progress records.
async fn query_detail(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let found = ui.access(&headers, Role::Viewer).and_then(|_| {
        let term = ui.driver.ready_term()?;
        term.queries.find(&name)
    });
    match found {
        Ok(entry) => {
            let progress = entry.progress_after(None);
            let body = serde_json::json!({
                "detail": view::detail(&entry, progress.last()),
                "records": view::records(&progress),
            });
            Json(body).into_response()
        }
        Err(e) => error_response(e),
    }
}

async fn stop(State(ui): State<Arc<Ui>>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    let stopped = async {
        ui.access(&headers, Role::Admin)?;
        let term = ui.driver.ready_term()?;
        let entry = query::stop(&ui.driver, &term, &name).await?;
        tracing::info!(query = %entry.name, "stopped from the web UI");
        Ok::<_, DriverError>(view::summary(&entry, entry.last_progress().as_ref()))
    };
    match stopped.await {
        Ok(summary) => Json(summary).into_response(),
        Err(e) => error_response(e),
    }
}
