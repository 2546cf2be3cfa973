//! Who may call what: the roles, the table of gRPC methods and the role each
//! needs, and the decision over a caller's credentials. The decision is a
//! pure function, unit-tested here; [`layer`] gathers the credentials of a
//! request and carries the decision out.
//!
//! ```text
//!  request ─► method ─► need(method) ── Open ─────────────────────────► serve
//!                           │ Role(r)
//!                           ▼
//!     bearer token ─► Tokens ─┐
//!     client cert ─► CA check ├─► decide ─ Ok(grant) ─────────────────► serve
//!                             ┘           └ Err ─► UNAUTHENTICATED / PERMISSION_DENIED
//! ```
//!
//! Invariant: a method missing from [`need`] needs `admin`, so a new RPC is
//! closed until it is given a role here.

pub mod failures;
pub mod layer;
pub mod tokens;

use std::fmt;

use crate::error::DriverError;

/// A caller's role. `Admin` may do everything; `Viewer` reads; `Executor`
/// attaches to run tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Viewer,
    Executor,
}

impl Role {
    /// The role named `s` (a token file entry, a certificate's OU).
    pub fn parse(s: &str) -> Option<Role> {
        match s.trim().to_ascii_lowercase().as_str() {
            "admin" => Some(Role::Admin),
            "viewer" => Some(Role::Viewer),
            "executor" => Some(Role::Executor),
            _ => None,
        }
    }

    /// True when this role may make a call that needs `needed`.
    pub fn grants(self, needed: Role) -> bool {
        self == Role::Admin || self == needed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
            Role::Executor => "executor",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a gRPC method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Health checks and reflection, so that probes and grpcurl work, and
    /// the drivers' PeerService, whose stream grants nothing: open.
    Open,
    /// A QueryService call.
    Api(Role),
    /// The executors' ClusterService.
    Cluster,
}

/// The table of methods (`/package.Service/Method`) and what each needs.
pub fn need(path: &str) -> Need {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (service, method) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match service {
        "grpc.health.v1.Health"
        | "grpc.reflection.v1.ServerReflection"
        | "grpc.reflection.v1alpha.ServerReflection"
        | "sluice.v1.PeerService" => Need::Open,
        "sluice.v1.ClusterService" => Need::Cluster,
        "sluice.v1.QueryService" => match method {
            "Get" | "List" | "Wait" | "Progress" | "Cluster" => Need::Api(Role::Viewer),
            _ => Need::Api(Role::Admin),
        },
        _ => Need::Api(Role::Admin),
    }
}

/// Which credentials this driver asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// `--auth-tokens`: QueryService calls need a token or a client
    /// certificate, with a role.
    pub tokens: bool,
    /// `--client-ca`: ClusterService needs a client certificate signed by it.
    pub client_ca: bool,
}

/// A bearer token as checked against the token file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    Absent,
    /// Known, with the entry's name (never the token) and role.
    Known {
        name: String,
        role: Role,
    },
    Unknown,
}

/// A client certificate as checked against the client CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertCheck {
    Absent,
    /// Signed by the client CA and valid now; `role` from its OU.
    Valid {
        subject: String,
        role: Option<Role>,
    },
    /// Presented but refused (wrong CA, expired, ...): why.
    Invalid(String),
}

/// The credentials a request carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub token: TokenCheck,
    pub cert: CertCheck,
}

/// Who was let in, for the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// No credentials are asked for this call.
    Open,
    Token {
        name: String,
        role: Role,
    },
    Cert {
        subject: String,
        role: Role,
    },
}

/// Whether `caller` may call `method` under `policy`.
pub fn decide(policy: Policy, method: &str, caller: &Caller) -> Result<Grant, DriverError> {
    let name = method.rsplit('/').next().unwrap_or(method);
    match need(method) {
        Need::Open => Ok(Grant::Open),
        Need::Cluster if policy.client_ca => cert_only(name, &caller.cert),
        Need::Cluster if policy.tokens => credential(name, Role::Executor, caller, policy),
        Need::Api(role) if policy.tokens => credential(name, role, caller, policy),
        Need::Cluster | Need::Api(_) => Ok(Grant::Open),
    }
}

/// With a client CA, executors prove who they are by certificate alone.
fn cert_only(name: &str, cert: &CertCheck) -> Result<Grant, DriverError> {
    match cert {
        CertCheck::Absent => Err(DriverError::Unauthenticated(format!(
            "{name} needs a client certificate signed by the driver's --client-ca \
             (the executor's --tls-cert and --tls-key)"
        ))),
        CertCheck::Invalid(why) => Err(refused_cert(why)),
        CertCheck::Valid { subject, role } => granted_cert(name, Role::Executor, subject, *role),
    }
}

/// A token, or else a client certificate, with a role that grants `needed`.
fn credential(
    name: &str,
    needed: Role,
    caller: &Caller,
    policy: Policy,
) -> Result<Grant, DriverError> {
    match (&caller.token, &caller.cert) {
        (TokenCheck::Known { name: who, role }, _) => {
            if role.grants(needed) {
                Ok(Grant::Token {
                    name: who.clone(),
                    role: *role,
                })
            } else {
                Err(denied(name, needed, &format!("token {who:?}"), *role))
            }
        }
        (TokenCheck::Unknown, _) => Err(DriverError::Unauthenticated(
            "the bearer token is not valid for this driver".into(),
        )),
        (TokenCheck::Absent, CertCheck::Valid { subject, role }) if policy.client_ca => {
            granted_cert(name, needed, subject, *role)
        }
        (TokenCheck::Absent, CertCheck::Invalid(why)) if policy.client_ca => Err(refused_cert(why)),
        (TokenCheck::Absent, _) => Err(DriverError::Unauthenticated(format!(
            "{name} needs credentials: a bearer token (--token or SLUICE_TOKEN){}",
            if policy.client_ca {
                " or a client certificate signed by the driver's --client-ca"
            } else {
                ""
            }
        ))),
    }
}

fn granted_cert(
    name: &str,
    needed: Role,
    subject: &str,
    role: Option<Role>,
) -> Result<Grant, DriverError> {
    match role {
        Some(r) if r.grants(needed) => Ok(Grant::Cert {
            subject: subject.to_string(),
            role: r,
        }),
        Some(r) => Err(denied(name, needed, &format!("certificate {subject:?}"), r)),
        None => Err(DriverError::PermissionDenied(format!(
            "{name} needs the {needed} role; the client certificate {subject:?} has no role \
             (its OU must be admin, viewer or executor)"
        ))),
    }
}

fn denied(name: &str, needed: Role, who: &str, has: Role) -> DriverError {
    DriverError::PermissionDenied(format!(
        "{name} needs the {needed} role; the caller ({who}) has the {has} role"
    ))
}

fn refused_cert(why: &str) -> DriverError {
    DriverError::Unauthenticated(format!("the client certificate is refused: {why}"))
}

#[cfg(test)]
mod tests;
