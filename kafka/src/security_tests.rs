//! Tests of the security settings read for a connection (`security`),
//! without sockets: files and variables checked and named before any
//! connection, the configuration krafka gets, and what a refused
//! certificate or login says (never the password).

use std::sync::Arc;

use krafka::KrafkaError;
use krafka::auth::SecurityProtocol as KrafkaProtocol;
use rcgen::{CertificateParams, KeyPair};
use rustls::{AlertDescription, CertificateError};
use sluice_common::secrets::Secrets;
use sluice_common::spec::{KafkaSecurity, SaslMechanism, SecurityProtocol};

use super::Target;
use super::security::{Secured, rustls_error};

const FIELD: &str = "sink.kafka.security";
const PASSWORD: &str = "s3cret-pw";

/// A directory with a self-signed certificate and its key, another key,
/// a password file and a file that is not PEM.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        let other = KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("other-key.pem"), other.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("password"), format!("{PASSWORD}\n")).unwrap();
        std::fs::write(dir.path().join("junk"), "not pem at all: hunter2").unwrap();
        Files { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// Files from this directory, variables starting with `TEST_KAFKA_`.
    fn secrets(&self) -> Secrets {
        Secrets::new(Some(self.dir.path()), &["TEST_KAFKA_"]).unwrap()
    }

    fn load(&self, s: &KafkaSecurity) -> crate::Result<Secured> {
        Secured::load(s, &self.secrets(), FIELD)
    }

    /// SASL_SSL with SCRAM-SHA-512, this CA and this password file.
    fn sasl_ssl(&self) -> KafkaSecurity {
        KafkaSecurity {
            protocol: SecurityProtocol::SaslSsl,
            ssl_ca: Some(self.path("cert.pem")),
            sasl_mechanism: Some(SaslMechanism::ScramSha512),
            sasl_username: Some("alice".into()),
            sasl_password_file: Some(self.path("password")),
            ..Default::default()
        }
    }
}

fn load_err(f: &Files, s: &KafkaSecurity) -> String {
    let e = f.load(s).unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    e.to_string()
}

#[test]
fn files_and_variables_are_named_before_any_connection() {
    let f = Files::new();
    let ok = f.sasl_ssl();
    f.load(&ok).unwrap();
    let load_err = |s: &KafkaSecurity| load_err(&f, s);

    let e = load_err(&KafkaSecurity {
        ssl_ca: Some("no-such-ca.pem".into()),
        ..ok.clone()
    });
    assert!(
        e.contains("sink.kafka.security.ssl_ca") && e.contains("no-such-ca.pem cannot be read"),
        "{e}"
    );
    let e = load_err(&KafkaSecurity {
        ssl_ca: Some(f.path("junk")),
        ..ok.clone()
    });
    assert!(
        e.contains("ssl_ca") && e.contains("no PEM certificate"),
        "{e}"
    );

    let e = load_err(&KafkaSecurity {
        sasl_password_file: None,
        sasl_password_env: Some("TEST_KAFKA_NO_SUCH_PASSWORD".into()),
        ..ok.clone()
    });
    assert!(
        e.contains("sink.kafka.security.sasl_password_env")
            && e.contains("TEST_KAFKA_NO_SUCH_PASSWORD is not set"),
        "{e}"
    );

    let mtls = |key: &str| KafkaSecurity {
        ssl_certificate: Some(f.path("cert.pem")),
        ssl_key: Some(f.path(key)),
        ..ok.clone()
    };
    f.load(&mtls("key.pem")).unwrap();
    let e = load_err(&mtls("other-key.pem"));
    assert!(
        e.contains("sink.kafka.security.ssl_key") && e.contains("does not go with"),
        "{e}"
    );
    let e = load_err(&mtls("junk"));
    assert!(e.contains("no unencrypted private key"), "{e}");
    assert!(
        !e.contains("hunter2"),
        "a key file's bytes are never shown: {e}"
    );

    // Settings that do not fit the protocol are refused as the spec does.
    let e = load_err(&KafkaSecurity {
        protocol: SecurityProtocol::Plaintext,
        ..ok
    });
    assert!(e.contains("sink.kafka.security.protocol"), "{e}");
}

/// A spec names where its secrets are; the process reads only what the
/// operator's `--secrets-dir` and `--secret-env-prefix` allow, and only
/// regular files of at most 1 MiB.
#[test]
fn only_the_operators_secrets_are_read() {
    let f = Files::new();
    let ok = f.sasl_ssl();
    let e = Secured::load(&ok, &Secrets::default(), FIELD).unwrap_err();
    assert!(
        e.to_string().contains("sink.kafka.security.ssl_ca")
            && e.to_string().contains("no --secrets-dir"),
        "{e}"
    );
    for (settings, field) in [
        (
            KafkaSecurity {
                sasl_password_file: Some("/etc/hostname".into()),
                ..ok.clone()
            },
            "sasl_password_file",
        ),
        (
            KafkaSecurity {
                ssl_ca: Some("/etc/ssl/certs/ca-certificates.crt".into()),
                ..ok.clone()
            },
            "ssl_ca",
        ),
        (
            KafkaSecurity {
                sasl_password_file: None,
                sasl_password_env: Some("SLUICE_DRIVER".into()),
                ..ok.clone()
            },
            "sasl_password_env",
        ),
    ] {
        let e = load_err(&f, &settings);
        assert!(e.contains(&format!("{FIELD}.{field}")), "{e}");
        assert!(
            e.contains("is outside --secrets-dir") || e.contains("--secret-env-prefix"),
            "{e}"
        );
    }
    // A device inside the directory is refused at once, unread.
    let dev = Secrets::new::<&str>(Some(std::path::Path::new("/dev")), &[]).unwrap();
    let zero = KafkaSecurity {
        protocol: SecurityProtocol::Ssl,
        ssl_ca: Some("/dev/zero".into()),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let e = Secured::load(&zero, &dev, FIELD).unwrap_err().to_string();
    assert!(
        e.contains("sink.kafka.security.ssl_ca") && e.contains("is a character device"),
        "{e}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn settings_become_krafkas_configuration() {
    let f = Files::new();
    let s = f.load(&f.sasl_ssl()).unwrap();
    let auth = s.krafka().unwrap();
    assert_eq!(auth.security_protocol(), &KrafkaProtocol::SaslSsl);
    assert_eq!(
        auth.sasl_mechanism().map(|m| format!("{m:?}")).as_deref(),
        Some("ScramSha512")
    );
    assert!(auth.tls_config().is_some());
    let login = s.login().unwrap();
    assert_eq!(
        (login.mechanism, login.user, login.password),
        (SaslMechanism::ScramSha512, "alice", PASSWORD)
    );
    assert!(s.tls().is_some());

    let tls_only = KafkaSecurity {
        protocol: SecurityProtocol::Ssl,
        ssl_ca: Some(f.path("cert.pem")),
        ..Default::default()
    };
    let s = f.load(&tls_only).unwrap();
    assert_eq!(
        s.krafka().unwrap().security_protocol(),
        &KrafkaProtocol::Ssl
    );
    assert!(s.login().is_none());

    let plain = KafkaSecurity {
        protocol: SecurityProtocol::SaslPlaintext,
        sasl_mechanism: Some(SaslMechanism::Plain),
        sasl_username: Some("bob".into()),
        sasl_password_file: Some(f.path("password")),
        ..Default::default()
    };
    let s = f.load(&plain).unwrap();
    let auth = s.krafka().unwrap();
    assert_eq!(auth.security_protocol(), &KrafkaProtocol::SaslPlaintext);
    assert!(auth.tls_config().is_none() && s.tls().is_none());

    let none = Secured::load(&KafkaSecurity::default(), &Secrets::default(), FIELD).unwrap();
    assert!(none.krafka().is_none() && none.tls().is_none() && none.login().is_none());
}

#[test]
fn a_refused_login_names_user_and_mechanism_and_never_the_password() {
    let f = Files::new();
    let s = f.load(&f.sasl_ssl()).unwrap();
    assert!(!format!("{s:?}").contains(PASSWORD));

    let text = s.sasl_refused("the broker answered 58 SASL_AUTHENTICATION_FAILED");
    assert!(
        text.starts_with("SASL authentication failed for user \"alice\" (SCRAM-SHA-512)"),
        "{text}"
    );
    assert!(
        text.contains("not retried") && text.contains(&f.path("password")),
        "{text}"
    );

    // Whatever krafka or a broker says goes through the same words, with
    // the password taken out should it be there.
    let target = Target {
        servers: "b1:9093".into(),
        secured: s,
    };
    let krafka = KrafkaError::auth(format!(
        "SASL authentication failed: SaslAuthenticationFailed - bad password {PASSWORD}"
    ));
    let e = target.error("connect", &krafka);
    assert!(!e.is_retryable(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("kafka at b1:9093: connect: SASL authentication failed for user \"alice\""),
        "{text}"
    );
    assert!(
        !text.contains(PASSWORD) && text.contains("<redacted>"),
        "{text}"
    );

    let unsupported = KrafkaError::auth(
        "SASL handshake failed: UnsupportedSaslMechanism. Broker supports: [\"PLAIN\"]",
    );
    let text = target.error("connect", &unsupported).to_string();
    assert!(
        text.contains("the broker does not enable SCRAM-SHA-512"),
        "{text}"
    );

    // A broker that cannot be reached stays retryable.
    let down = KrafkaError::network(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert!(target.error("connect", &down).is_retryable());
}

#[test]
fn a_refused_certificate_says_which_and_what_to_fix() {
    let f = Files::new();
    let pinned = f.load(&f.sasl_ssl()).unwrap();
    let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
    let text = pinned.tls_refused(&unknown);
    assert_eq!(
        text,
        format!(
            "the broker's certificate is not signed by ssl_ca {} (sink.kafka.security.ssl_ca); \
             not retried",
            f.path("cert.pem")
        )
    );
    let system = f.load(&KafkaSecurity {
        ssl_ca: None,
        ..f.sasl_ssl()
    });
    // A machine without CA certificates cannot load this; the error names
    // ssl_ca then.
    match system {
        Ok(system) => assert!(
            system
                .tls_refused(&unknown)
                .contains("not signed by a CA this system trusts; set sink.kafka.security.ssl_ca")
        ),
        Err(e) => assert!(e.to_string().contains("ssl_ca"), "{e}"),
    }
    let text = pinned.tls_refused(&rustls::Error::InvalidCertificate(
        CertificateError::NotValidForName,
    ));
    assert!(text.contains("not for the address connected to"), "{text}");
    let required = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
    let text = pinned.tls_refused(&required);
    assert!(
        text.contains("asks for a client certificate; set sink.kafka.security.ssl_certificate"),
        "{text}"
    );
}

#[test]
fn tls_errors_are_found_under_io_and_client_errors() {
    let tls = || rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
    let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls());
    assert_eq!(rustls_error(&io), Some(&tls()));
    let network = KrafkaError::Network(Arc::new(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        tls(),
    )));
    assert_eq!(rustls_error(&network), Some(&tls()));
    let auth = KrafkaError::auth_with_source(
        "TLS handshake failed",
        std::io::Error::new(std::io::ErrorKind::InvalidData, tls()),
    );
    assert_eq!(rustls_error(&auth), Some(&tls()));
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    assert_eq!(rustls_error(&reset), None);
}
