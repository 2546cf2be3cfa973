//! The failpoints' control on the `--http` port, in debug builds only (see
//! [`crate::failpoint`]):
//!
//! ```text
//!  PUT /debug/failpoints/{name}   body `on` or `off`   admin
//!  GET /debug/failpoints/{name}   {"armed": bool, "hits": [..]}   admin
//! ```
//! An unknown name is a 404 that names the known points.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::{Ui, error_response};
use crate::auth::Role;
use crate::error::DriverError;
use crate::failpoint::{self, Point};

/// `router` with the failpoints' routes.
pub(super) fn routes(router: Router<Arc<Ui>>) -> Router<Arc<Ui>> {
    router.route("/debug/failpoints/{name}", get(status).put(set))
}

async fn status(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Err(e) = ui.access(&headers, Role::Admin) {
        return error_response(e);
    }
    match Point::named(&name) {
        Some(point) => Json(failpoint::status(point)).into_response(),
        None => unknown(&name),
    }
}

async fn set(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: String,
) -> Response {
    if let Err(e) = ui.access(&headers, Role::Admin) {
        return error_response(e);
    }
    let Some(point) = Point::named(&name) else {
        return unknown(&name);
    };
    let on = match body.trim() {
        "on" => true,
        "off" => false,
        other => {
            return error_response(DriverError::Invalid(format!(
                "failpoint {name}: the body must be `on` or `off`, not {other:?}"
            )));
        }
    };
    failpoint::set(point, on);
    Json(failpoint::status(point)).into_response()
}

fn unknown(name: &str) -> Response {
    let error = format!(
        "no failpoint {name:?}; the failpoints are {}",
        Point::names()
    );
    let body = Json(serde_json::json!({ "error": error, "retryable": false }));
    (StatusCode::NOT_FOUND, body).into_response()
}
