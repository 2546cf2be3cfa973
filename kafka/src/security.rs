//! How a Kafka connection is secured: the spec's [`KafkaSecurity`] read
//! into what krafka and the raw `EndTxn` connection need, and the errors of
//! a refused login or certificate.
//!
//! ```text
//!  KafkaSecurity, Secrets, field ─► Secured::load: check the settings; read the
//!                          CA, the client certificate and key, the password, now
//!     ├─ krafka() ─► AuthConfig (ssl, sasl_*, .with_tls)   every krafka connection
//!     ├─ tls()    ─► rustls ClientConfig on ring            the raw connection (wire)
//!     └─ login()  ─► mechanism, user, password              the raw connection (wire)
//!  refusal(krafka error), tls_refused, sasl_refused ─► "SASL authentication failed
//!       for user "u" (SCRAM-SHA-512): ...; not retried: check ..."
//! ```
//!
//! Trust: with `ssl_ca`, only that CA (pinned, as Kafka's Java client and
//! librdkafka do); without, the system's roots. A file that cannot be read
//! or parsed, or a password variable that is not set, is an invalid-spec
//! error naming the field (`sink.kafka.security.ssl_ca`), found before any
//! connection is tried. Files and variables are read only as the process's
//! [`Secrets`] allow (`--secrets-dir`, `--secret-env-prefix`): a file is a
//! regular file of at most 1 MiB inside the secrets directory.
//!
//! Secrets: the password is read when connecting, kept zeroized and never
//! printed; a key file's bytes likewise. Every error text made here passes
//! through [`Secured::redact`], so not even a broker that echoed the
//! password could put it in a message.

use std::fmt;
use std::sync::{Arc, OnceLock};

use krafka::KrafkaError;
use krafka::auth::{AuthConfig, TlsConfig};
use krafka::error::ErrorCode;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};
use sluice_common::secrets::Secrets;
use sluice_common::spec::{KafkaSecurity, SaslMechanism};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// Where the sink's settings are: `EndTxn` is only sent for the sink.
pub(super) const SINK_FIELD: &str = "sink.kafka.security";

/// A password as read: zeroed when dropped, never printed.
#[derive(Clone)]
struct Secret(Zeroizing<String>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The TLS material of the settings, read and checked.
#[derive(Clone)]
struct Tls {
    /// The CA's PEM, for krafka; `None`: the system's roots.
    ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and its key, PEM, for krafka.
    identity: Option<(Vec<u8>, Zeroizing<Vec<u8>>)>,
    /// The raw connection's configuration.
    config: Arc<ClientConfig>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("pinned_ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// A SASL login, for the raw connection.
pub(super) struct Login<'a> {
    pub mechanism: SaslMechanism,
    pub user: &'a str,
    pub password: &'a str,
}

/// The security of one connection: the settings, where they are in the
/// spec (`field`), and what they name, read when connecting.
#[derive(Clone, Debug)]
pub(super) struct Secured {
    settings: KafkaSecurity,
    field: String,
    password: Option<Secret>,
    tls: Option<Tls>,
}

impl Secured {
    /// No TLS, no SASL.
    pub fn plaintext() -> Secured {
        Secured {
            settings: KafkaSecurity::default(),
            field: String::new(),
            password: None,
            tls: None,
        }
    }

    /// Checks `settings` (at `field`) and reads the files and the variable
    /// they name, as `secrets` allows. Blocks on file reads (small files,
    /// each within a deadline): see [`Secured::load_async`].
    pub fn load(settings: &KafkaSecurity, secrets: &Secrets, field: &str) -> Result<Secured> {
        if settings.is_plaintext() {
            return Ok(Secured::plaintext());
        }
        settings.validate(field)?;
        settings.check_secrets(field, secrets)?;
        let password = settings.sasl_password(field, secrets)?.map(Secret);
        let tls = match settings.protocol.tls() {
            true => Some(load_tls(settings, secrets, field)?),
            false => None,
        };
        Ok(Secured {
            settings: settings.clone(),
            field: field.to_string(),
            password,
            tls,
        })
    }

    /// [`Secured::load`] off the async threads (the first use of the
    /// system's roots reads a directory of certificates).
    pub async fn load_async(
        settings: &KafkaSecurity,
        secrets: &Secrets,
        field: &str,
    ) -> Result<Secured> {
        if settings.is_plaintext() {
            return Ok(Secured::plaintext());
        }
        let (settings, secrets, field) = (settings.clone(), secrets.clone(), field.to_string());
        tokio::task::spawn_blocking(move || Secured::load(&settings, &secrets, &field))
            .await
            .map_err(|e| Error::Config(format!("reading the Kafka security settings: {e}")))?
    }

    /// The settings.
    pub fn settings(&self) -> &KafkaSecurity {
        &self.settings
    }

    /// krafka's configuration; `None` for plaintext.
    pub fn krafka(&self) -> Option<AuthConfig> {
        let tls = self.tls.as_ref().map(|t| {
            let config = match &t.ca_pem {
                Some(pem) => TlsConfig::new().with_ca_cert_pem(pem.clone()),
                None => TlsConfig::new().with_native_roots(),
            };
            match &t.identity {
                Some((cert, key)) => config.with_client_cert_pem(cert.clone(), key.clone()),
                None => config,
            }
        });
        let sasl = self.login().map(|l| match l.mechanism {
            SaslMechanism::Plain => AuthConfig::sasl_plain(l.user, l.password),
            SaslMechanism::ScramSha256 => AuthConfig::sasl_scram_sha256(l.user, l.password),
            SaslMechanism::ScramSha512 => AuthConfig::sasl_scram_sha512(l.user, l.password),
        });
        match (sasl, tls) {
            (None, None) => None,
            (None, Some(tls)) => Some(AuthConfig::ssl(tls)),
            (Some(sasl), None) => Some(sasl),
            (Some(sasl), Some(tls)) => Some(sasl.with_tls(tls)),
        }
    }

    /// The raw connection's TLS configuration; `None` without TLS.
    pub fn tls(&self) -> Option<Arc<ClientConfig>> {
        self.tls.as_ref().map(|t| Arc::clone(&t.config))
    }

    /// The SASL login; `None` without SASL.
    pub fn login(&self) -> Option<Login<'_>> {
        if !self.settings.protocol.sasl() {
            return None;
        }
        Some(Login {
            mechanism: self.settings.sasl_mechanism?,
            user: self.settings.sasl_username.as_deref()?,
            password: self.password.as_ref()?.0.as_str(),
        })
    }

    /// `text` with the password, wherever it appears, replaced.
    pub fn redact(&self, text: &str) -> String {
        match &self.password {
            Some(p) if !p.0.is_empty() => text.replace(p.0.as_str(), "<redacted>"),
            _ => text.to_string(),
        }
    }

    /// What a refused login or certificate in a krafka error means, and
    /// what to fix; `None` for any other error.
    pub fn refusal(&self, e: &KrafkaError) -> Option<String> {
        if let Some(tls) = rustls_error(e) {
            return Some(self.tls_refused(tls));
        }
        match e {
            KrafkaError::Auth { message, .. } if self.settings.protocol.sasl() => {
                let detail = if message.contains("UnsupportedSaslMechanism") {
                    format!(
                        "the broker does not enable {} ({message})",
                        self.mechanism()
                    )
                } else {
                    message.clone()
                };
                Some(self.sasl_refused(&detail))
            }
            KrafkaError::Auth { message, .. } => Some(self.redact(&format!(
                "authentication failed: {message}; not retried: check {}",
                self.field
            ))),
            KrafkaError::Broker {
                code:
                    code @ (ErrorCode::SaslAuthenticationFailed
                    | ErrorCode::UnsupportedSaslMechanism
                    | ErrorCode::IllegalSaslState),
                message,
            } => Some(self.sasl_refused(&format!("the broker answered {code:?}: {message}"))),
            _ => None,
        }
    }

    /// A refused SASL login: the user, the mechanism, what the broker or
    /// the exchange said, and where the credentials are set.
    pub fn sasl_refused(&self, detail: &str) -> String {
        let f = &self.field;
        let source = match (
            &self.settings.sasl_password_file,
            &self.settings.sasl_password_env,
        ) {
            (Some(path), _) => format!("the file {path} ({f}.sasl_password_file)"),
            (_, Some(var)) => format!("the environment variable {var} ({f}.sasl_password_env)"),
            _ => "the password setting".to_string(),
        };
        self.redact(&format!(
            "SASL authentication failed for user {:?} ({}): {detail}; not retried: check \
             {f}.sasl_username, {f}.sasl_mechanism and the password in {source}",
            self.settings.sasl_username.as_deref().unwrap_or(""),
            self.mechanism(),
        ))
    }

    /// A TLS handshake that failed on a certificate or an alert: which
    /// certificate, and what to fix.
    pub fn tls_refused(&self, e: &rustls::Error) -> String {
        let f = &self.field;
        let s = &self.settings;
        let what = match e {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => match &s.ssl_ca {
                Some(ca) => {
                    format!("the broker's certificate is not signed by ssl_ca {ca} ({f}.ssl_ca)")
                }
                None => format!(
                    "the broker's certificate is not signed by a CA this system trusts; set \
                     {f}.ssl_ca to the CA that signed it"
                ),
            },
            rustls::Error::InvalidCertificate(
                c @ (CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }),
            ) => format!("the broker's certificate is not for the address connected to ({c})"),
            rustls::Error::InvalidCertificate(
                c @ (CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. }),
            ) => format!("the broker's certificate is out of its validity period ({c})"),
            rustls::Error::InvalidCertificate(c) => {
                format!("the broker's certificate is refused: {c}")
            }
            rustls::Error::AlertReceived(
                alert @ (AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::AccessDenied),
            ) => match &s.ssl_certificate {
                None => format!(
                    "the broker refused the connection ({alert:?}): it asks for a client \
                     certificate; set {f}.ssl_certificate and {f}.ssl_key"
                ),
                Some(cert) => format!(
                    "the broker refused the client certificate {cert} ({f}.ssl_certificate): \
                     {alert:?}"
                ),
            },
            other => format!("TLS handshake failed: {other}"),
        };
        self.redact(&format!("{what}; not retried"))
    }

    fn mechanism(&self) -> &'static str {
        self.settings
            .sasl_mechanism
            .map_or("no mechanism", SaslMechanism::as_str)
    }
}

/// The rustls error at the root of `e`, if any: a TLS failure, as opposed
/// to the network failing under it. An `io::Error` carries it as its inner
/// error, which `source()` skips.
pub(super) fn rustls_error<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        let io = err
            .downcast_ref::<std::io::Error>()
            .or_else(|| err.downcast_ref::<Arc<std::io::Error>>().map(|a| &**a));
        if let Some(t) = io
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(t);
        }
        next = err.source();
    }
    None
}

/// Reads and checks the CA, the client certificate and its key.
fn load_tls(s: &KafkaSecurity, secrets: &Secrets, field: &str) -> Result<Tls> {
    let bad = |f: &str, why: String| Error::invalid(format!("{field}.{f}"), why);
    let read = |f: &str, path: &str| secrets.read_file(&format!("{field}.{f}"), path);
    let (roots, ca_pem) = match &s.ssl_ca {
        Some(path) => {
            let pem = read("ssl_ca", path)?.to_vec();
            let mut roots = RootCertStore::empty();
            for cert in certificates(&pem).map_err(|why| bad("ssl_ca", format!("{path} {why}")))? {
                roots.add(cert).map_err(|e| {
                    bad(
                        "ssl_ca",
                        format!("{path} holds a certificate that is not a CA: {e}"),
                    )
                })?;
            }
            (Arc::new(roots), Some(pem))
        }
        None => (system_roots().map_err(|why| bad("ssl_ca", why))?, None),
    };
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots);
    let (config, identity) = match (&s.ssl_certificate, &s.ssl_key) {
        (Some(cert), Some(key)) => {
            let cert_pem = read("ssl_certificate", cert)?.to_vec();
            let key_pem = read("ssl_key", key)?;
            let chain = certificates(&cert_pem)
                .map_err(|why| bad("ssl_certificate", format!("{cert} {why}")))?;
            // The key's own parse error is not shown: it could quote the key.
            let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
                bad(
                    "ssl_key",
                    format!(
                        "{key} holds no unencrypted private key in PEM (PKCS#8, PKCS#1 or SEC1)"
                    ),
                )
            })?;
            let config = builder.with_client_auth_cert(chain, private).map_err(|e| {
                bad(
                    "ssl_key",
                    format!("{key} does not go with ssl_certificate {cert}: {e}"),
                )
            })?;
            (config, Some((cert_pem, key_pem)))
        }
        _ => (builder.with_no_client_auth(), None),
    };
    Ok(Tls {
        ca_pem,
        identity,
        config: Arc::new(config),
    })
}

/// The certificates of a PEM file; an error when it holds none.
fn certificates(pem: &[u8]) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("is not a PEM file of certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (no -----BEGIN CERTIFICATE----- line)".into());
    }
    Ok(certs)
}

/// The system's CA certificates, read once per process.
fn system_roots() -> std::result::Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<std::result::Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "no ssl_ca is given, and this system has no CA certificates to trust \
                     (install ca-certificates, or set ssl_ca)"
                        .to_string(),
                );
            }
            Ok(Arc::new(roots))
        })
        .clone()
}
