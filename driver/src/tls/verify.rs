//! The rustls hooks of the driver's TLS: the certificate resolver that
//! serves the reloaded key, and the client verifier that defers the chain
//! check to the auth layer (see the module above), plus the words a refusal
//! uses and the subject and role read from a client certificate.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::Keys;
use crate::reload::Watched;

/// Serves the certificate in use now: a reload applies to the next
/// handshake.
pub(super) struct Resolver(pub Arc<Watched<Keys>>);

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.get().certified.clone())
    }
}

/// Asks for a client certificate and checks the handshake signature (that
/// the client holds its key), but leaves the chain to
/// [`Keys::check_client`].
#[derive(Debug)]
pub(super) struct Deferred(Signatures);

impl Deferred {
    pub fn new(provider: Arc<CryptoProvider>) -> Self {
        Deferred(Signatures(provider))
    }
}

/// Checks a handshake's signatures (that the peer holds the key of the
/// certificate it presented) with the provider's algorithms: the one check
/// every verifier here makes, whatever it decides about the chain.
#[derive(Debug)]
pub(super) struct Signatures(pub Arc<CryptoProvider>);

impl Signatures {
    pub fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    pub fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    pub fn schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl ClientCertVerifier for Deferred {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Judged per call against the client CA; see the module header.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.schemes()
    }
}

/// Why a client certificate was refused, in a user's words.
pub(super) fn reason(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "it has expired".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "it is not valid yet".into()
            }
            CertificateError::UnknownIssuer => {
                "it is not signed by the driver's --client-ca".into()
            }
            CertificateError::BadSignature => "its signature does not verify".into(),
            CertificateError::Revoked => "it is revoked".into(),
            other => format!("{other:?}"),
        },
        other => other.to_string(),
    }
}

/// A certificate's subject (for logs and errors) and its first
/// organizational unit (the caller's role).
pub(super) fn subject_and_role(cert: &CertificateDer<'_>) -> (String, Option<String>) {
    match x509_parser::parse_x509_certificate(cert.as_ref()) {
        Ok((_, parsed)) => {
            let subject = parsed.subject();
            let ou = subject
                .iter_organizational_unit()
                .next()
                .and_then(|a| a.as_str().ok())
                .map(str::to_string);
            (subject.to_string(), ou)
        }
        Err(_) => ("(unreadable subject)".into(), None),
    }
}
