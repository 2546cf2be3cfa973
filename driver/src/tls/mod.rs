//! TLS on the driver's gRPC port, with rustls: the certificate and key
//! (`--tls-cert`, `--tls-key`), reloaded when their files change, and the
//! client CA (`--client-ca`) that executor and client certificates are
//! checked against.
//!
//! ```text
//!  TCP ─► handshake (rustls; cert from Keys, reloaded) ─► TlsConn { peer certs }
//!                                                              │
//!            auth layer: check_client(peer certs) against the client CA now
//! ```
//!
//! A client certificate is asked for but not required at the handshake, and
//! its chain is not judged there: the handshake only proves that the client
//! holds the certificate's key. The chain, the CA and the validity dates are
//! checked per call by [`Keys::check_client`], so that a refusal is a gRPC
//! `UNAUTHENTICATED` that names the reason (and health checks need no
//! certificate at all). Nothing is granted for a certificate that this check
//! did not pass.

pub mod incoming;
pub mod peer;
mod verify;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::CertifiedKey;
use sluice_common::small_file::{self, Limits};

use crate::auth::{CertCheck, Role};
use crate::error::DriverError;
use crate::reload::Watched;

/// The files of the driver's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// The certificate and client CA in use.
pub struct Keys {
    certified: Arc<CertifiedKey>,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
}

/// The crypto provider of every TLS connection the driver serves.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsFiles {
    /// Loads the files, and reloads them when they change.
    pub fn watch(&self) -> Result<Arc<Watched<Keys>>, DriverError> {
        let files = std::iter::once(self.cert.clone())
            .chain(std::iter::once(self.key.clone()))
            .chain(self.client_ca.clone())
            .collect();
        let me = self.clone();
        Watched::new("tls", files, move || me.load())
    }

    /// Reads and checks the files; each error names its flag and file.
    pub fn load(&self) -> Result<Keys, DriverError> {
        let provider = provider();
        let certs = read_certs("--tls-cert", &self.cert)?;
        let key_pem = read("--tls-key", &self.key)?;
        // The key's own parse error is not shown: it could quote the key.
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
            bad(
                "--tls-key",
                &self.key,
                "holds no unencrypted private key in PEM (PKCS#8, PKCS#1 or SEC1)",
            )
        })?;
        let certified = CertifiedKey::from_der(certs, key, &provider).map_err(|e| {
            bad(
                "--tls-key",
                &self.key,
                &format!("does not fit --tls-cert: {e}"),
            )
        })?;
        let client_ca = match &self.client_ca {
            None => None,
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs("--client-ca", path)? {
                    roots
                        .add(cert)
                        .map_err(|e| bad("--client-ca", path, &e.to_string()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| bad("--client-ca", path, &e.to_string()))?;
                Some(verifier)
            }
        };
        Ok(Keys {
            certified: Arc::new(certified),
            client_ca,
        })
    }
}

impl Keys {
    /// Checks a client's certificate chain against the client CA now, and
    /// reads its role from the certificate's organizational unit.
    pub fn check_client(&self, chain: Option<&[CertificateDer<'static>]>) -> CertCheck {
        let (Some(verifier), Some([end, intermediates @ ..])) = (&self.client_ca, chain) else {
            return CertCheck::Absent;
        };
        if let Err(e) = verifier.verify_client_cert(end, intermediates, UnixTime::now()) {
            return CertCheck::Invalid(verify::reason(&e));
        }
        let (subject, role) = verify::subject_and_role(end);
        CertCheck::Valid {
            subject,
            role: role.as_deref().and_then(Role::parse),
        }
    }
}

/// Builds the rustls server configuration over reloaded keys.
pub fn server_config(keys: Arc<Watched<Keys>>, client_ca: bool) -> Arc<rustls::ServerConfig> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default TLS versions");
    let builder = if client_ca {
        builder.with_client_cert_verifier(Arc::new(verify::Deferred::new(provider())))
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_cert_resolver(Arc::new(verify::Resolver(keys)));
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// The bytes of a file a flag names: a regular file of at most
/// [`Limits::SECRET`], read within its deadline.
fn read(flag: &str, path: &std::path::Path) -> Result<Vec<u8>, DriverError> {
    small_file::read(path, Limits::SECRET).map_err(|why| bad(flag, path, &why))
}

fn read_certs(
    flag: &str,
    path: &std::path::Path,
) -> Result<Vec<CertificateDer<'static>>, DriverError> {
    let certs = CertificateDer::pem_slice_iter(&read(flag, path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(flag, path, &e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(flag, path, "holds no certificate"));
    }
    Ok(certs)
}

fn bad(flag: &str, path: &std::path::Path, why: &str) -> DriverError {
    DriverError::Config(format!("{flag} {}: {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/dev/zero` as the certificate is refused at once, naming the flag:
    /// the driver never reads a device or waits on a pipe.
    #[test]
    fn a_device_is_no_certificate() {
        let started = std::time::Instant::now();
        let files = TlsFiles {
            cert: "/dev/zero".into(),
            key: "/dev/null".into(),
            client_ca: None,
        };
        let e = files.load().err().expect("refused").to_string();
        assert!(
            e.contains("--tls-cert /dev/zero: is a character device"),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
