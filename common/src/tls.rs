//! The client side of Sluice's transport security, shared by the executor,
//! the CLI and the tests: which scheme a driver address takes, the TLS
//! settings of a channel, and the bearer token sent with every call.
//!
//! ```text
//!  --tls-ca, --tls-cert/--tls-key ──► ClientTls ──► Endpoint (https://, rustls)
//!  --token / SLUICE_TOKEN          ──► Bearer    ──► `authorization: Bearer …`
//! ```
//!
//! The PEM files are read again on every connect, so a client that
//! reconnects after a certificate rotation uses the new files. A token is
//! marked sensitive and never appears in a `Debug` or an error.

use std::fmt;
use std::path::{Path, PathBuf};

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::error::{Error, Result};
use crate::small_file::{self, Limits};

/// TLS settings of a client: the CA that signs the driver's certificate and,
/// for mutual TLS, this client's own certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// `None`: plaintext (`http://`).
    pub ca: Option<PathBuf>,
    /// The client certificate and key (PEM), for mutual TLS.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The flags these came from, for errors: CA, certificate, key.
    flags: [&'static str; 3],
}

/// The flags of a client towards a driver.
pub const DRIVER_FLAGS: [&str; 3] = ["--tls-ca", "--tls-cert", "--tls-key"];

impl Default for ClientTls {
    fn default() -> Self {
        ClientTls {
            ca: None,
            identity: None,
            flags: DRIVER_FLAGS,
        }
    }
}

impl ClientTls {
    /// Settings from `--tls-ca`, `--tls-cert` and `--tls-key`.
    pub fn from_flags(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Self> {
        ClientTls::from_named_flags(DRIVER_FLAGS, ca, cert, key)
    }

    /// Settings from the flags named in `flags` (CA, certificate, key). A
    /// certificate without its key (or the other way round), a client
    /// certificate without a CA, or a file that is not PEM is refused,
    /// naming the flag.
    pub fn from_named_flags(
        flags: [&'static str; 3],
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Self> {
        let [ca_flag, cert_flag, key_flag] = flags;
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::Config(format!("{cert_flag} needs {key_flag}")));
            }
            (None, Some(_)) => {
                return Err(Error::Config(format!("{key_flag} needs {cert_flag}")));
            }
        };
        if identity.is_some() && ca.is_none() {
            return Err(Error::Config(format!(
                "{cert_flag} needs {ca_flag}: a client certificate is sent only over TLS"
            )));
        }
        let tls = ClientTls {
            ca,
            identity,
            flags,
        };
        tls.config()?;
        Ok(tls)
    }

    /// True when connections use TLS.
    pub fn enabled(&self) -> bool {
        self.ca.is_some()
    }

    /// The URL scheme of a driver address under these settings.
    pub fn scheme(&self) -> &'static str {
        if self.enabled() { "https" } else { "http" }
    }

    /// `endpoint` with these TLS settings applied (unchanged when plaintext).
    /// The driver's certificate must name the host of the address.
    pub fn apply(&self, endpoint: Endpoint) -> Result<Endpoint> {
        match self.config()? {
            None => Ok(endpoint),
            Some(config) => endpoint
                .tls_config(config)
                .map_err(|e| Error::Config(format!("TLS settings: {e}"))),
        }
    }

    /// The TLS settings of a channel, read from the files now; `None` when
    /// plaintext.
    pub fn config(&self) -> Result<Option<ClientTlsConfig>> {
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        let [ca_flag, cert_flag, key_flag] = self.flags;
        let mut config =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem(ca_flag, ca)?));
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(
                read_pem(cert_flag, cert)?,
                read_pem(key_flag, key)?,
            ));
        }
        Ok(Some(config))
    }
}

/// Reads a PEM file (a regular file of at most [`Limits::SECRET`]),
/// refusing one that holds no PEM block, naming the flag.
pub fn read_pem(flag: &str, path: &Path) -> Result<Vec<u8>> {
    let bytes = small_file::read(path, Limits::SECRET)
        .map_err(|why| Error::Config(format!("{flag} {}: {why}", path.display())))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(Error::Config(format!(
            "{flag} {}: not a PEM file (no -----BEGIN line)",
            path.display()
        )));
    }
    Ok(bytes)
}

/// A bearer token sent as `authorization: Bearer <token>`; `None` sends
/// nothing. Use it as a tonic interceptor.
#[derive(Clone, Default)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl Bearer {
    /// A token from `--token`/`SLUICE_TOKEN` (blank means none). Refuses a
    /// token that cannot be a header value, without echoing it.
    pub fn new(token: Option<&str>) -> Result<Self> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Bearer(None)),
            Some(t) => {
                let mut value: AsciiMetadataValue = MetadataValue::try_from(format!("Bearer {t}"))
                    .map_err(|_| {
                        Error::Config("--token: not a valid token (printable ASCII only)".into())
                    })?;
                value.set_sensitive(true);
                Ok(Bearer(Some(value)))
            }
        }
    }

    /// True when a token is set.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_set() {
            "Bearer(<redacted>)"
        } else {
            "Bearer(none)"
        })
    }
}

impl PartialEq for Bearer {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_ref().map(|v| v.as_bytes()) == other.0.as_ref().map(|v| v.as_bytes())
    }
}

impl Eq for Bearer {}

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_come_in_pairs() {
        let p = |s: &str| Some(PathBuf::from(s));
        let e = ClientTls::from_flags(p("/ca"), p("/c"), None).unwrap_err();
        assert!(e.to_string().contains("--tls-cert needs --tls-key"), "{e}");
        let e = ClientTls::from_flags(None, p("/c"), p("/k")).unwrap_err();
        assert!(e.to_string().contains("needs --tls-ca"), "{e}");
        let e = ClientTls::from_flags(p("/no/such/ca.pem"), None, None).unwrap_err();
        assert!(e.to_string().contains("--tls-ca /no/such/ca.pem"), "{e}");
        assert_eq!(
            ClientTls::from_flags(None, None, None).unwrap().scheme(),
            "http"
        );
    }

    #[test]
    fn a_device_or_a_pipe_is_refused_at_once() {
        let started = std::time::Instant::now();
        let e = read_pem("--tls-ca", Path::new("/dev/zero")).unwrap_err();
        assert!(
            e.to_string()
                .contains("--tls-ca /dev/zero: is a character device"),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_file_without_pem_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "hello").unwrap();
        let e = read_pem("--tls-ca", &f).unwrap_err().to_string();
        assert!(
            e.contains("--tls-ca") && e.contains("not a PEM file"),
            "{e}"
        );
    }

    #[test]
    fn a_token_is_never_printed() {
        let b = Bearer::new(Some("s3cret-token")).unwrap();
        assert!(!format!("{b:?}").contains("s3cret"));
        let e = Bearer::new(Some("bad\ntoken")).unwrap_err().to_string();
        assert!(!e.contains("bad") && e.contains("--token"), "{e}");
        assert!(!Bearer::new(Some("  ")).unwrap().is_set());
    }
}
