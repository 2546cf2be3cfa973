//! The TLS client of a standby's stream to the leader (`PeerService`, see
//! `leader::detect`), for a gRPC port that takes TLS only.
//!
//! It takes the leader's certificate unchecked, on purpose. The stream
//! carries nothing secret and grants nothing: it is only the trigger. The
//! evidence that the leader's process is gone is the kernel refusing new
//! connections to its port (`leader::probe`), which no certificate proves
//! or disproves. An impostor on the path could at most keep the stream
//! open (the lease then decides) or break it (the probes of the real
//! address then decide). The port asks for no client certificate at the
//! handshake (see the module above), so the standby presents none.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::provider;
use super::verify::Signatures;

/// Accepts any server certificate, but still checks the handshake's
/// signatures (the server holds the key of what it presented).
#[derive(Debug)]
struct Unchecked(Signatures);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
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

/// The client configuration of the peer stream: HTTP/2 by ALPN.
pub fn client_config() -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unchecked(Signatures(provider()))))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr`, for tonic's `connect_with_connector`.
pub async fn connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> io::Result<TokioIo<TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = TlsConnector::from(config).connect(name, tcp).await?;
    Ok(TokioIo::new(tls))
}
