//! Who may use the web UI. With `--auth-tokens`, every UI call needs a
//! token of the token file, presented as an `authorization: Bearer`
//! header, or through a session: `POST /ui/api/login` takes a token and
//! sets the `sluice_ui` cookie to a new random session id, which the
//! driver maps to the hash of that token (the cookie never holds the
//! token). Each call checks the session's token against the token file
//! as it is now, so removing a token from the file ends its sessions;
//! signing out ends one. Reading needs `viewer` (or `admin`); stopping a
//! query needs `admin`. Without a token file the UI is open, like the
//! gRPC API.
//!
//! ```text
//!  bearer ─► token ─► hash ─┐
//!  cookie ─► session id ─► hash ─┴► Tokens::check_hash ─► access(need) ─ Ok(role) ─► handler
//!                                                             └ Err ─► 401 / 403
//! ```
//! The static assets carry no data and are served to anyone.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};

use crate::auth::{Role, TokenCheck};
use crate::error::DriverError;

/// The cookie that holds a UI session's id.
pub const COOKIE_NAME: &str = "sluice_ui";
/// How long a login lasts, in seconds.
pub const SESSION_SECONDS: u64 = 12 * 3600;
/// The most sessions open at once: past it, the oldest ends.
pub const MAX_SESSIONS: usize = 10_000;

/// What a request presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential<'a> {
    Bearer(&'a str),
    Session(&'a str),
}

/// The credential a request carries: a bearer header first, then the
/// session cookie.
pub fn credential(headers: &HeaderMap) -> Option<Credential<'_>> {
    if let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, token) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| Credential::Bearer(token.trim()));
    }
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| Credential::Session(value.trim()))
}

/// The open sessions: each id with the hash of the token it was opened
/// with, and when it ends.
#[derive(Debug, Default)]
pub struct Sessions {
    open: Mutex<HashMap<String, (Instant, [u8; 32])>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, [u8; 32])>> {
        self.open.lock().expect("UI sessions lock poisoned")
    }

    /// Opens a session for the token of hash `token` at `now`; its id.
    pub fn open(&self, token: [u8; 32], now: Instant) -> String {
        let id = crate::auth::tokens::new_token();
        let ends = now + Duration::from_secs(SESSION_SECONDS);
        let mut open = self.lock();
        open.retain(|_, (end, _)| *end > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, (end, _))| *end)
                .map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        open.insert(id.clone(), (ends, token));
        id
    }

    /// The hash of the token of session `id`, while it is open.
    pub fn token(&self, id: &str, now: Instant) -> Option<[u8; 32]> {
        let mut open = self.lock();
        match open.get(id) {
            Some((end, token)) if *end > now => Some(*token),
            Some(_) => {
                open.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id`.
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// Whether a caller whose token checked as `check` may make a UI call that
/// needs `need`. `required` is false without a token file: then anyone
/// may, as admin. Returns the caller's role.
pub fn access(required: bool, check: &TokenCheck, need: Role) -> Result<Role, DriverError> {
    if !required {
        return Ok(Role::Admin);
    }
    match check {
        TokenCheck::Absent => Err(DriverError::Unauthenticated(
            "this driver requires a token: sign in with a viewer or admin token".into(),
        )),
        TokenCheck::Unknown => Err(DriverError::Unauthenticated(
            "the token is not valid for this driver".into(),
        )),
        TokenCheck::Known { role, .. } if role.grants(need) => Ok(*role),
        TokenCheck::Known { name, role } => Err(DriverError::PermissionDenied(format!(
            "token {name:?} has the role {role}; this needs {need}"
        ))),
    }
}

/// The `set-cookie` value that keeps session `id`.
pub fn login_cookie(id: &str) -> String {
    format!("{COOKIE_NAME}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}")
}

/// The `set-cookie` value that ends a session.
pub fn logout_cookie() -> String {
    format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn known(role: Role) -> TokenCheck {
        TokenCheck::Known {
            name: "ops".into(),
            role,
        }
    }

    #[test]
    fn the_credential_is_the_bearer_header_or_the_session_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(credential(&h), None);
        h.insert(COOKIE, HeaderValue::from_static("a=1; sluice_ui=abc ; b=2"));
        assert_eq!(credential(&h), Some(Credential::Session("abc")));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer xyz"));
        assert_eq!(credential(&h), Some(Credential::Bearer("xyz")));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic xyz"));
        assert_eq!(credential(&h), None);
    }

    #[test]
    fn a_session_maps_a_random_id_to_its_token_until_it_ends() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let a = sessions.open([1; 32], t0);
        let b = sessions.open([1; 32], t0);
        assert_ne!(a, b, "each sign-in gets its own id");
        assert_eq!(a.len(), 64);
        assert_eq!(sessions.token(&a, t0), Some([1; 32]));
        sessions.close(&a);
        assert_eq!(sessions.token(&a, t0), None, "signed out");
        let later = t0 + Duration::from_secs(SESSION_SECONDS);
        assert_eq!(sessions.token(&b, later), None, "expired");
        assert_eq!(sessions.token("forged", t0), None);
    }

    #[test]
    fn roles_decide_what_the_ui_may_do() {
        assert_eq!(
            access(false, &TokenCheck::Absent, Role::Admin).unwrap(),
            Role::Admin
        );
        let e = access(true, &TokenCheck::Absent, Role::Viewer).unwrap_err();
        assert!(matches!(e, DriverError::Unauthenticated(_)), "{e}");
        let e = access(true, &TokenCheck::Unknown, Role::Viewer).unwrap_err();
        assert!(matches!(e, DriverError::Unauthenticated(_)), "{e}");
        assert_eq!(
            access(true, &known(Role::Viewer), Role::Viewer).unwrap(),
            Role::Viewer
        );
        assert_eq!(
            access(true, &known(Role::Admin), Role::Viewer).unwrap(),
            Role::Admin
        );
        let e = access(true, &known(Role::Viewer), Role::Admin).unwrap_err();
        assert!(e.to_string().contains("needs admin"), "{e}");
        let e = access(true, &known(Role::Executor), Role::Viewer).unwrap_err();
        assert!(matches!(e, DriverError::PermissionDenied(_)), "{e}");
    }

    #[test]
    fn the_cookie_holds_the_session_id() {
        let c = login_cookie("0a1b");
        assert!(
            c.starts_with("sluice_ui=0a1b;") && c.contains("HttpOnly"),
            "{c}"
        );
        assert!(c.contains("SameSite=Strict"), "{c}");
    }
}
