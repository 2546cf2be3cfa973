//! The authorization table and decision, without a socket.

use super::*;

const SUBMIT: &str = "/sluice.v1.QueryService/Submit";
const LIST: &str = "/sluice.v1.QueryService/List";
const ATTACH: &str = "/sluice.v1.ClusterService/Attach";
const HEALTH: &str = "/grpc.health.v1.Health/Check";

fn token(role: Role) -> Caller {
    Caller {
        token: TokenCheck::Known {
            name: "t".into(),
            role,
        },
        cert: CertCheck::Absent,
    }
}

fn cert(role: Option<Role>) -> Caller {
    Caller {
        token: TokenCheck::Absent,
        cert: CertCheck::Valid {
            subject: "CN=e1".into(),
            role,
        },
    }
}

const NOBODY: Caller = Caller {
    token: TokenCheck::Absent,
    cert: CertCheck::Absent,
};

const ALL: Policy = Policy {
    tokens: true,
    client_ca: true,
};

fn code(r: Result<Grant, DriverError>) -> tonic::Code {
    tonic::Status::from(r.unwrap_err()).code()
}

#[test]
fn the_table() {
    assert_eq!(need(HEALTH), Need::Open);
    assert_eq!(
        need("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
        Need::Open
    );
    assert_eq!(need(SUBMIT), Need::Api(Role::Admin));
    assert_eq!(need("/sluice.v1.QueryService/Stop"), Need::Api(Role::Admin));
    for m in ["Get", "List", "Wait", "Progress", "Cluster"] {
        assert_eq!(
            need(&format!("/sluice.v1.QueryService/{m}")),
            Need::Api(Role::Viewer)
        );
    }
    assert_eq!(need(ATTACH), Need::Cluster);
    assert_eq!(need("/sluice.v1.PeerService/WatchTerm"), Need::Open);
    // Anything unknown needs admin.
    assert_eq!(need("/sluice.v1.QueryService/Drop"), Need::Api(Role::Admin));
    assert_eq!(need("/other.Svc/X"), Need::Api(Role::Admin));
}

#[test]
fn open_without_a_policy() {
    let open = Policy::default();
    assert_eq!(decide(open, SUBMIT, &NOBODY).unwrap(), Grant::Open);
    assert_eq!(decide(open, ATTACH, &NOBODY).unwrap(), Grant::Open);
    assert_eq!(decide(ALL, HEALTH, &NOBODY).unwrap(), Grant::Open);
}

#[test]
fn roles() {
    assert!(decide(ALL, SUBMIT, &token(Role::Admin)).is_ok());
    assert!(decide(ALL, LIST, &token(Role::Viewer)).is_ok());
    assert!(decide(ALL, LIST, &token(Role::Admin)).is_ok());
    let e = decide(ALL, SUBMIT, &token(Role::Viewer))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "Submit needs the admin role; the caller (token \"t\") has the viewer role"
    );
    assert_eq!(
        code(decide(ALL, SUBMIT, &token(Role::Viewer))),
        tonic::Code::PermissionDenied
    );
    assert_eq!(
        code(decide(ALL, LIST, &token(Role::Executor))),
        tonic::Code::PermissionDenied
    );
    // A certificate's OU is a role too.
    assert!(decide(ALL, SUBMIT, &cert(Some(Role::Admin))).is_ok());
    let e = decide(ALL, SUBMIT, &cert(None)).unwrap_err().to_string();
    assert!(e.contains("has no role"), "{e}");
}

#[test]
fn missing_and_bad_credentials() {
    let e = decide(ALL, SUBMIT, &NOBODY).unwrap_err();
    assert!(
        e.to_string().contains("needs credentials: a bearer token"),
        "{e}"
    );
    assert_eq!(
        code(decide(ALL, SUBMIT, &NOBODY)),
        tonic::Code::Unauthenticated
    );
    let bad = Caller {
        token: TokenCheck::Unknown,
        cert: CertCheck::Absent,
    };
    assert_eq!(code(decide(ALL, LIST, &bad)), tonic::Code::Unauthenticated);
    let expired = Caller {
        token: TokenCheck::Absent,
        cert: CertCheck::Invalid("expired".into()),
    };
    let e = decide(ALL, LIST, &expired).unwrap_err().to_string();
    assert_eq!(e, "the client certificate is refused: expired");
}

#[test]
fn executors_need_a_certificate_under_a_client_ca() {
    let e = decide(ALL, ATTACH, &token(Role::Executor)).unwrap_err();
    assert!(e.to_string().contains("needs a client certificate"), "{e}");
    assert!(decide(ALL, ATTACH, &cert(Some(Role::Executor))).is_ok());
    assert_eq!(
        code(decide(ALL, ATTACH, &cert(Some(Role::Viewer)))),
        tonic::Code::PermissionDenied
    );
    let bad = Caller {
        token: TokenCheck::Absent,
        cert: CertCheck::Invalid("not signed by the client CA".into()),
    };
    assert_eq!(
        code(decide(ALL, ATTACH, &bad)),
        tonic::Code::Unauthenticated
    );
    // Without a client CA, an executor token attaches.
    let tokens = Policy {
        tokens: true,
        client_ca: false,
    };
    assert!(decide(tokens, ATTACH, &token(Role::Executor)).is_ok());
    assert_eq!(
        code(decide(tokens, ATTACH, &token(Role::Viewer))),
        tonic::Code::PermissionDenied
    );
    assert_eq!(
        code(decide(tokens, ATTACH, &NOBODY)),
        tonic::Code::Unauthenticated
    );
    // A client CA alone leaves QueryService open.
    let mtls = Policy {
        tokens: false,
        client_ca: true,
    };
    assert_eq!(decide(mtls, SUBMIT, &NOBODY).unwrap(), Grant::Open);
}
