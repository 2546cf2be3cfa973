//! Which requests the HTTP port serves: its defence against DNS rebinding
//! and cross-site request forgery.
//!
//! ```text
//!  request ─► Host served here? ──no──► 421, naming the host and --http-allowed-hosts
//!             │ yes
//!             ▼
//!           changes state (not GET/HEAD/OPTIONS) and sent cross-site? ──yes──► 403
//!             │ no
//!             ▼
//!           the UI, /healthz, /readyz, /metrics
//! ```
//!
//! - A Host is served when it is an IP address (a rebinding page is
//!   reached through a name it controls, never through an address),
//!   `localhost`, the host of `--advertise` or `--http-advertise`, or one of
//!   `--http-allowed-hosts`; a request without a Host (HTTP/1.0) too.
//! - A browser says where a request comes from: `Sec-Fetch-Site` (which it
//!   sets itself; `same-origin` or `none` pass) or else `Origin`, whose host
//!   must be the request's Host. A request with neither is not from a
//!   browser page, and passes (curl, scripts): a forged request needs a
//!   victim's browser, which sends them.
//!
//! The decisions are pure functions of the headers; [`layer`] applies them.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The host names this driver answers to, lower case, without ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    names: Vec<String>,
}

impl Hosts {
    /// `localhost`, the hosts of `advertise` (`HOST:PORT`) and
    /// `http_advertise` (a URL), and `extra`.
    pub fn new(advertise: &str, http_advertise: Option<&str>, extra: &[String]) -> Self {
        let from_url = http_advertise.map(|u| {
            let rest = u.split_once("://").map_or(u, |(_, r)| r);
            rest.split('/').next().unwrap_or_default().to_string()
        });
        let mut names: Vec<String> = ["localhost".to_string(), advertise.to_string()]
            .into_iter()
            .chain(from_url)
            .chain(extra.iter().cloned())
            .map(|h| hostname(&h).to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        names.sort();
        names.dedup();
        Hosts { names }
    }

    /// Whether a request whose Host header is `host` is served.
    pub fn serves(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        let name = hostname(host).to_ascii_lowercase();
        let ip = name.trim_start_matches('[').trim_end_matches(']');
        ip.parse::<IpAddr>().is_ok() || self.names.contains(&name)
    }
}

/// The host of `HOST[:PORT]`: an IPv6 literal keeps its brackets.
fn hostname(authority: &str) -> &str {
    let authority = authority.trim();
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Whether a request is a state-changing one sent by a browser page of
/// another site (see the module header).
pub fn cross_site(method: &Method, headers: &HeaderMap) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = text("origin") else {
        return false;
    };
    let origin_host = origin.split_once("://").map_or(origin, |(_, r)| r);
    let host = text("host").unwrap_or_default();
    !origin_host.eq_ignore_ascii_case(host)
}

/// The middleware that refuses what [`Hosts::serves`] and [`cross_site`]
/// refuse.
pub async fn layer(State(hosts): State<Arc<Hosts>>, req: Request<Body>, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    if !hosts.serves(host) {
        let host = host.unwrap_or_default().to_string();
        tracing::warn!(%host, "HTTP request for a host this driver does not serve refused");
        let body = format!(
            "this driver does not serve the host {host:?}; add it to --http-allowed-hosts\n"
        );
        return (StatusCode::MISDIRECTED_REQUEST, body).into_response();
    }
    if cross_site(req.method(), req.headers()) {
        tracing::warn!(method = %req.method(), path = %req.uri().path(), "cross-site request refused");
        let body = "a request from another site's page may not change anything here\n";
        return (StatusCode::FORBIDDEN, body).into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn addresses_and_configured_names_are_served_other_names_not() {
        let hosts = Hosts::new(
            "driver-0.sluice:7070",
            Some("https://sluice.example.com/ui"),
            &["ops.internal".into()],
        );
        for ok in [
            "127.0.0.1:7071",
            "10.1.2.3",
            "[::1]:7071",
            "localhost:7071",
            "driver-0.sluice:7071",
            "SLUICE.example.com",
            "ops.internal:80",
        ] {
            assert!(hosts.serves(Some(ok)), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:7071",
            "127.0.0.1.evil.example",
        ] {
            assert!(!hosts.serves(Some(refused)), "{refused}");
        }
        assert!(hosts.serves(None));
    }

    #[test]
    fn a_state_change_from_another_sites_page_is_cross_site() {
        let post = Method::POST;
        let evil = headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:7071"),
        ]);
        assert!(cross_site(&post, &evil));
        assert!(!cross_site(&Method::GET, &evil), "reading is not changing");
        let own = headers(&[
            ("origin", "http://127.0.0.1:7071"),
            ("host", "127.0.0.1:7071"),
        ]);
        assert!(!cross_site(&post, &own));
        let fetched = headers(&[("sec-fetch-site", "cross-site"), ("host", "127.0.0.1:7071")]);
        assert!(cross_site(&post, &fetched));
        let same_site = headers(&[("sec-fetch-site", "same-site")]);
        assert!(cross_site(&post, &same_site), "another port or subdomain");
        let same = headers(&[("sec-fetch-site", "same-origin")]);
        assert!(!cross_site(&post, &same));
        assert!(!cross_site(&post, &HeaderMap::new()), "curl sends neither");
    }
}
