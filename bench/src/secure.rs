//! `bench --tls`: the scenario's cluster with TLS on the driver's port,
//! mutual TLS for the executors and a token for the client, with
//! certificates that `sluice certs init` writes into a temporary directory.

use std::path::Path;

use sluice_common::tls::{Bearer, ClientTls};

use sluice_cli::certs::{self, InitArgs};

/// The certificates and tokens of one benchmark run.
pub struct BenchTls {
    dir: tempfile::TempDir,
}

impl BenchTls {
    /// Writes a CA, certificates and tokens for localhost.
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        certs::write(&InitArgs {
            dir: dir.path().join("pki"),
            hosts: Vec::new(),
            etcd_hosts: Vec::new(),
            days: 1,
        })?;
        Ok(BenchTls { dir })
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join("pki").join(name).display().to_string()
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join("pki").join(name)
    }

    /// The driver's flags: TLS, a client CA and the token file.
    pub fn driver_args(&self) -> Vec<String> {
        [
            ("--tls-cert", "driver.pem"),
            ("--tls-key", "driver-key.pem"),
            ("--client-ca", "ca.pem"),
            ("--auth-tokens", "tokens.yaml"),
        ]
        .iter()
        .flat_map(|(flag, file)| [flag.to_string(), self.file(file)])
        .collect()
    }

    /// An executor's flags: the CA and its client certificate.
    pub fn executor_args(&self) -> Vec<String> {
        [
            ("--tls-ca", "ca.pem"),
            ("--tls-cert", "executor.pem"),
            ("--tls-key", "executor-key.pem"),
        ]
        .iter()
        .flat_map(|(flag, file)| [flag.to_string(), self.file(file)])
        .collect()
    }

    /// An in-process executor's TLS settings.
    pub fn executor_tls(&self) -> anyhow::Result<ClientTls> {
        Ok(ClientTls::from_flags(
            Some(self.path("ca.pem")),
            Some(self.path("executor.pem")),
            Some(self.path("executor-key.pem")),
        )?)
    }

    /// The client's TLS settings and admin token.
    pub fn client(&self) -> anyhow::Result<(ClientTls, Bearer)> {
        let tls = ClientTls::from_flags(Some(self.path("ca.pem")), None, None)?;
        let token = read_token(&self.path("admin.token"))?;
        Ok((tls, Bearer::new(Some(&token))?))
    }
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim().to_string())
}
