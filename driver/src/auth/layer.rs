//! The tower layer in front of every gRPC service: it reads a request's
//! bearer token and its connection's client certificate, asks
//! [`decide`](super::decide), and either passes the request on or answers
//! with the refusal's status. Tokens are compared by hash and never logged.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::{Either, Ready, ready};
use http::{Request, Response};
use tower::{Layer, Service};
use tracing::{debug, info};

use super::failures::Failures;
use super::tokens::Tokens;
use super::{Caller, CertCheck, Grant, Need, Policy, TokenCheck, decide, need};
use crate::error::DriverError;
use crate::reload::Watched;
use crate::tls::Keys;
use crate::tls::incoming::Peer;

/// The answer to every call of a plaintext client of the TLS port.
pub const PLAINTEXT: &str =
    "this driver takes TLS connections only: connect with https:// and --tls-ca";

/// The credentials this driver checks, shared by every connection.
#[derive(Clone)]
pub struct Auth {
    policy: Policy,
    tokens: Option<Arc<Watched<Tokens>>>,
    keys: Option<Arc<Watched<Keys>>>,
    /// Failed authentications by peer: a peer past its budget is refused
    /// before its credentials are checked.
    failures: Arc<Failures>,
}

impl Auth {
    /// `tokens` from `--auth-tokens`; `keys` from the TLS flags, with
    /// `client_ca` when `--client-ca` is set.
    pub fn new(
        tokens: Option<Arc<Watched<Tokens>>>,
        keys: Option<Arc<Watched<Keys>>>,
        client_ca: bool,
    ) -> Self {
        Auth {
            policy: Policy {
                tokens: tokens.is_some(),
                client_ca: client_ca && keys.is_some(),
            },
            tokens,
            keys,
            failures: Arc::default(),
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    fn caller<B>(&self, req: &Request<B>) -> Caller {
        let token = match (&self.tokens, req.headers().get(http::header::AUTHORIZATION)) {
            (_, None) => TokenCheck::Absent,
            (None, Some(_)) => TokenCheck::Absent,
            (Some(tokens), Some(value)) => match bearer(value) {
                Some(t) => tokens.get().check(t),
                None => TokenCheck::Unknown,
            },
        };
        let cert = match (&self.keys, req.extensions().get::<Peer>()) {
            (Some(keys), Some(peer)) if self.policy.client_ca => {
                keys.get().check_client(peer.certs.as_deref())
            }
            _ => CertCheck::Absent,
        };
        Caller { token, cert }
    }
}

/// The answer to a peer past its budget of failed authentications.
pub const SLOW_DOWN: &str = "too many failed authentications from this address; wait a few seconds";

/// The address of a request's peer: the TLS port's, or the plaintext
/// port's (tonic's connect info).
fn remote_ip<B>(req: &Request<B>) -> Option<std::net::IpAddr> {
    let tls = req.extensions().get::<Peer>().and_then(|p| p.remote);
    let plain = || {
        req.extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
            .and_then(|c| c.remote_addr())
    };
    tls.or_else(plain).map(|a| a.ip())
}

/// The token of an `authorization: Bearer <token>` header.
fn bearer(value: &http::HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let (scheme, token) = text.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl<S> Layer<S> for Auth {
    type Service = Authorized<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authorized {
            inner,
            auth: self.clone(),
        }
    }
}

/// A service behind [`Auth`].
#[derive(Clone)]
pub struct Authorized<S> {
    inner: S,
    auth: Auth,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Authorized<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let path = req.uri().path().to_string();
        if let Some(peer) = req.extensions().get::<Peer>().filter(|p| !p.tls) {
            info!(method = %path, remote = ?peer.remote, "plaintext call to the TLS port refused");
            let status = tonic::Status::from(DriverError::Unauthenticated(PLAINTEXT.into()));
            return Either::Left(ready(Ok(status.into_http())));
        }
        let policy = self.auth.policy;
        if need(&path) != Need::Open && (policy.tokens || policy.client_ca) {
            let remote = remote_ip(&req);
            let now = Instant::now();
            let failures = &self.auth.failures;
            if !failures.admits(remote, now) {
                let status = tonic::Status::from(DriverError::Unauthenticated(SLOW_DOWN.into()));
                return Either::Left(ready(Ok(status.into_http())));
            }
            let caller = self.auth.caller(&req);
            match decide(policy, &path, &caller) {
                Ok(grant) => {
                    if grant != Grant::Open {
                        debug!(method = %path, grant = ?grant, "authorized");
                    }
                }
                Err(refusal) => {
                    debug!(method = %path, remote = ?remote, reason = %refusal, "call refused");
                    if matches!(refusal, DriverError::Unauthenticated(_)) {
                        failures.failed(remote, now, "gRPC");
                    }
                    let status = tonic::Status::from(refusal);
                    return Either::Left(ready(Ok(status.into_http())));
                }
            }
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Either::Right(inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn bearer_headers() {
        let v = |s: &str| http::HeaderValue::from_str(s).unwrap();
        assert_eq!(bearer(&v("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&v("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&v("Basic abc")), None);
        assert_eq!(bearer(&v("abc")), None);
    }
}
