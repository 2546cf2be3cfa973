//! A secured test cluster's certificates and tokens: `sluice certs init`
//! (the real command) writes them into the cluster directory, and the
//! flags of each process point at them. Certificates a refusal test needs
//! (expired, from another CA) are issued here with `rcgen`.
//!
//! ```text
//! <tmp>/pki/        ca.pem, driver.pem, executor.pem, client.pem, etcd*.pem,
//!                   tokens.yaml, admin.token, viewer.token, executor.token
//! <tmp>/pki/extra/  certificates issued by a test
//! ```

use std::path::{Path, PathBuf};

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use sluice_common::tls::ClientTls;

use crate::bins::{CLI, bin};
use crate::cluster::{Cluster, DriverOpts};
use crate::node::{Driver, READY_TIMEOUT};

/// What a secured driver turns on.
#[derive(Debug, Clone, Copy)]
pub struct Secure {
    /// `--client-ca`: executors attach with a certificate.
    pub mtls: bool,
    /// `--auth-tokens`.
    pub tokens: bool,
}

/// TLS, mutual TLS and tokens.
pub const ALL: Secure = Secure {
    mtls: true,
    tokens: true,
};

/// The PKI of one test cluster.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Runs `sluice certs init <cluster>/pki`.
    pub fn init(cluster: &Cluster) -> Pki {
        let dir = cluster.root().join("pki");
        let out = std::process::Command::new(bin(CLI))
            .args(["certs", "init"])
            .arg(&dir)
            .output()
            .expect("run sluice certs init");
        assert!(out.status.success(), "sluice certs init: {out:?}");
        std::fs::create_dir_all(dir.join("extra")).unwrap();
        Pki { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A file of the PKI directory, as a flag value.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The token of `role` (admin, viewer or executor).
    pub fn token(&self, role: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{role}.token")))
            .expect("read token")
            .trim()
            .to_string()
    }

    /// Starts a driver of `cluster` with `secure` and waits until it is
    /// ready.
    pub async fn start_ready_driver(&self, cluster: &Cluster, secure: Secure) -> Driver {
        let driver = cluster.start_driver_with(DriverOpts {
            extra_args: self.driver_args(secure),
            ..Default::default()
        });
        driver.wait_ready(READY_TIMEOUT).await;
        driver
    }

    /// The driver's TLS and auth flags.
    pub fn driver_args(&self, secure: Secure) -> Vec<String> {
        let mut args = vec![
            "--tls-cert".into(),
            self.file("driver.pem"),
            "--tls-key".into(),
            self.file("driver-key.pem"),
        ];
        if secure.mtls {
            args.extend(["--client-ca".into(), self.file("ca.pem")]);
        }
        if secure.tokens {
            args.extend(["--auth-tokens".into(), self.file("tokens.yaml")]);
        }
        args
    }

    /// An executor's flags: its certificate under mTLS, else its token.
    pub fn executor_args(&self, secure: Secure) -> Vec<String> {
        let mut args = vec!["--tls-ca".into(), self.file("ca.pem")];
        if secure.mtls {
            args.extend([
                "--tls-cert".into(),
                self.file("executor.pem"),
                "--tls-key".into(),
                self.file("executor-key.pem"),
            ]);
        } else if secure.tokens {
            args.extend(["--token".into(), self.token("executor")]);
        }
        args
    }

    /// CLI flags with `role`'s token.
    pub fn cli_args(&self, role: &str) -> Vec<String> {
        vec![
            "--tls-ca".into(),
            self.file("ca.pem"),
            "--token".into(),
            self.token(role),
        ]
    }

    /// Client TLS settings trusting this CA, without a certificate.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls::from_flags(Some(self.dir.join("ca.pem")), None, None).expect("client TLS")
    }

    /// Issues a certificate signed by this CA into `extra/`, for a client
    /// or for a server on localhost: `expired` makes it one that ended in
    /// 2021. Returns (cert, key).
    pub fn issue(&self, name: &str, ou: &str, expired: bool) -> (String, String) {
        let ca_key =
            KeyPair::from_pem(&std::fs::read_to_string(self.dir.join("ca-key.pem")).unwrap())
                .expect("CA key");
        let ca_pem = std::fs::read_to_string(self.dir.join("ca.pem")).unwrap();
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).expect("CA");
        let mut params = client_params(name, ou);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        self.write_pair(name, &cert.pem(), &key.serialize_pem())
    }

    /// A new CA of its own, and a client certificate it signed: a
    /// stranger's. Returns (ca, cert, key).
    pub fn foreign(&self, name: &str, ou: &str) -> (String, String, String) {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, "Another CA");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = client_params(name, ou);
        params.subject_alt_names = vec![
            rcgen::SanType::DnsName("localhost".try_into().unwrap()),
            rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()),
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        let cert = params.signed_by(&key, &issuer).unwrap();
        let ca_path = self.dir.join("extra").join(format!("{name}-ca.pem"));
        std::fs::write(&ca_path, ca_cert.pem()).unwrap();
        let (c, k) = self.write_pair(name, &cert.pem(), &key.serialize_pem());
        (ca_path.display().to_string(), c, k)
    }

    fn write_pair(&self, name: &str, cert: &str, key: &str) -> (String, String) {
        let c = self.dir.join("extra").join(format!("{name}.pem"));
        let k = self.dir.join("extra").join(format!("{name}-key.pem"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c.display().to_string(), k.display().to_string())
    }
}

fn client_params(cn: &str, ou: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, ou);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params
}
