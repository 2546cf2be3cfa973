//! Who may use the web UI. With `--auth-tokens`, every UI call needs a
//! token of the token file: the `sluice_ui` cookie that `POST
//! /ui/api/login` sets, or an `authorization: Bearer` header. Reading needs
//! `viewer` (or `admin`); stopping a query needs `admin`. Without a token
//! file the UI is open, like the gRPC API.
//!
//! ```text
//!  cookie / bearer ─► token ─► Tokens::check ─► access(need) ─ Ok(role) ─► handler
//!                                                   └ Err ─► 401 / 403
//! ```
//! The static assets carry no data and are served to anyone.

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};

use crate::auth::{Role, TokenCheck};
use crate::error::DriverError;

/// The cookie that holds a UI session's token.
pub const COOKIE_NAME: &str = "sluice_ui";
/// How long a login lasts, in seconds.
pub const SESSION_SECONDS: u64 = 12 * 3600;

/// The token a request carries: a bearer header first, then the cookie.
pub fn token(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, token) = value.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.trim())
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

/// The `set-cookie` value that keeps `token` for a session, or why it
/// cannot be kept in a cookie.
pub fn login_cookie(token: &str) -> Result<String, DriverError> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
    if token.is_empty() || !token.chars().all(safe) {
        return Err(DriverError::Invalid(
            "this token has characters a cookie cannot hold; use one made by `sluice token new`"
                .into(),
        ));
    }
    Ok(format!(
        "{COOKIE_NAME}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}"
    ))
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
    fn the_token_comes_from_the_bearer_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(token(&h), None);
        h.insert(COOKIE, HeaderValue::from_static("a=1; sluice_ui=abc ; b=2"));
        assert_eq!(token(&h), Some("abc"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer xyz"));
        assert_eq!(token(&h), Some("xyz"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic xyz"));
        assert_eq!(token(&h), None);
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
    fn only_cookie_safe_tokens_are_kept() {
        let c = login_cookie("0a1b").unwrap();
        assert!(
            c.starts_with("sluice_ui=0a1b;") && c.contains("HttpOnly"),
            "{c}"
        );
        assert!(c.contains("SameSite=Strict"), "{c}");
        assert!(login_cookie("a b").is_err());
        assert!(login_cookie("a;b").is_err());
        assert!(login_cookie("").is_err());
    }
}
