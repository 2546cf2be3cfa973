//! The UI's static files, compiled into the binary from `driver/ui/`. They
//! carry no data, so they are served without credentials. A strict
//! content security policy allows only this origin's scripts and styles.

use std::sync::Arc;

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;

use super::Ui;

const INDEX: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const CHARTS_JS: &str = include_str!("../../ui/charts.js");
const STYLE: &str = include_str!("../../ui/style.css");
pub const UPLOT_JS: &str = include_str!("../../ui/vendor/uplot-1.6.32/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../ui/vendor/uplot-1.6.32/uPlot.min.css");

const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse + Clone {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (CONTENT_SECURITY_POLICY, CSP),
        ],
        body,
    )
}

pub fn routes() -> Router<Arc<Ui>> {
    const JS: &str = "text/javascript; charset=utf-8";
    const CSS: &str = "text/css; charset=utf-8";
    Router::new()
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route("/ui/app.js", get(|| async { file(JS, APP_JS) }))
        .route("/ui/charts.js", get(|| async { file(JS, CHARTS_JS) }))
        .route("/ui/style.css", get(|| async { file(CSS, STYLE) }))
        .route(
            "/ui/vendor/uPlot.iife.min.js",
            get(|| async { file(JS, UPLOT_JS) }),
        )
        .route(
            "/ui/vendor/uPlot.min.css",
            get(|| async { file(CSS, UPLOT_CSS) }),
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_vendored_chart_library_is_the_version_its_note_names() {
        assert!(super::UPLOT_JS.starts_with("/*! https://github.com/leeoniya/uPlot (v1.6.32) */"));
        let note = include_str!("../../ui/vendor/uplot-1.6.32/VERSION");
        assert!(note.contains("uplot@1.6.32"));
    }
}
