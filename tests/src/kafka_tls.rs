//! TLS for the Kafka security tests. tansu 0.6.0 has none: its `--cert`
//! and `--key` are in one clap group, so they cannot be given together,
//! and the broker builds a TLS acceptor it never uses. So the tests put a
//! TLS terminator ([`TlsFront`]) in front of a plaintext tansu, advertised
//! in its metadata, and every client connection (krafka's and the raw
//! `EndTxn` one) does a real TLS handshake against a certificate from
//! [`KafkaPki`].
//!
//! ```text
//!  client ─TLS─► TlsFront 127.0.0.1:F ─plaintext─► tansu 127.0.0.1:P
//!                (broker.pem; with mtls, a client        (advertises F)
//!                 certificate signed by ca.pem)
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A test CA and what it signed, as PEM files in `<cluster>/kafka-pki`:
/// `ca.pem`, `broker.pem`/`broker-key.pem` (for 127.0.0.1 and localhost),
/// `client.pem`/`client-key.pem`, and `other-ca.pem`, a CA that signed
/// none of them.
#[derive(Debug, Clone)]
pub struct KafkaPki {
    dir: PathBuf,
}

impl KafkaPki {
    /// Issues it all into `dir`.
    pub fn new(dir: PathBuf) -> KafkaPki {
        std::fs::create_dir_all(&dir).expect("create the PKI directory");
        let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
        let (ca_pem, issuer) = ca("Sluice Kafka test CA");
        write("ca.pem", ca_pem);
        let (other_pem, _) = ca("Another CA");
        write("other-ca.pem", other_pem);

        let mut broker = leaf("broker", ExtendedKeyUsagePurpose::ServerAuth);
        broker.subject_alt_names = vec![
            SanType::IpAddress("127.0.0.1".parse().unwrap()),
            SanType::DnsName("localhost".try_into().unwrap()),
        ];
        let key = KeyPair::generate().unwrap();
        write("broker.pem", broker.signed_by(&key, &issuer).unwrap().pem());
        write("broker-key.pem", key.serialize_pem());

        let client = leaf("sluice", ExtendedKeyUsagePurpose::ClientAuth);
        let key = KeyPair::generate().unwrap();
        write("client.pem", client.signed_by(&key, &issuer).unwrap().pem());
        write("client-key.pem", key.serialize_pem());
        KafkaPki { dir }
    }

    /// A file of the PKI, as a spec setting.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(params, key))
}

fn leaf(name: &str, usage: ExtendedKeyUsagePurpose) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    params
}

/// A TLS terminator on `127.0.0.1:port` in front of a plaintext broker on
/// `127.0.0.1:backend`, with the PKI's broker certificate; with `mtls`, a
/// client must present a certificate the PKI's CA signed. Its tasks run on
/// the test's runtime and stop when it is dropped.
#[derive(Debug)]
pub struct TlsFront {
    port: u16,
    _tasks: JoinSet<()>,
}

impl TlsFront {
    pub async fn start(port: u16, backend: u16, pki: &KafkaPki, mtls: bool) -> TlsFront {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(pki.file("broker.pem"))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_file(pki.file("broker-key.pem")).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if mtls {
            let mut roots = rustls::RootCertStore::empty();
            for ca in CertificateDer::pem_file_iter(pki.file("ca.pem")).unwrap() {
                roots.add(ca.unwrap()).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = Arc::new(builder.with_single_cert(certs, key).unwrap());
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("TLS front cannot bind 127.0.0.1:{port}: {e}"));
        let mut tasks = JoinSet::new();
        tasks.spawn(accept(
            listener,
            tokio_rustls::TlsAcceptor::from(config),
            backend,
        ));
        TlsFront {
            port,
            _tasks: tasks,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Accepts until aborted: a handshake, then bytes copied both ways. A
/// failed handshake just closes its connection (the client reports why).
async fn accept(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, backend: u16) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        connections.spawn(async move {
            let Ok(mut tls) = acceptor.accept(client).await else {
                return;
            };
            let Ok(mut broker) = TcpStream::connect(("127.0.0.1", backend)).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
        });
        // Reap finished connections as we go.
        while connections.try_join_next().is_some() {}
    }
}
