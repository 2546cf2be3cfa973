//! A secured etcd for the security tests: one member serving clients over
//! TLS with `--client-cert-auth` (certificates from the cluster's
//! [`Pki`]), `/health` and `/metrics` on a plaintext metrics port, and
//! optionally etcd's own authentication with a user `sluice` that may read
//! and write the `/sluice/` prefix only.
//!
//! ```text
//!  auth: start plaintext ─► users, roles, auth enable (JSON gateway) ─► stop ─┐
//!                                                                            ▼
//!  start with TLS + --client-cert-auth on the same data directory ─► wait /health
//! ```

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use crate::cluster::Cluster;
use crate::etcd::{ETCD_READY_TIMEOUT, Etcd, EtcdCluster, etcd_bin, member_args};
use crate::http;
use crate::ports::free_port;
use crate::secure::Pki;

/// The etcd user of the drivers and its password file.
#[derive(Debug, Clone)]
pub struct EtcdUser {
    pub user: String,
    pub password_file: PathBuf,
}

impl EtcdUser {
    /// The driver flags of this user.
    pub fn driver_args(&self) -> Vec<String> {
        vec![
            "--etcd-user".into(),
            self.user.clone(),
            "--etcd-password-file".into(),
            self.password_file.display().to_string(),
        ]
    }
}

/// The driver flags of an etcd secured by `pki`'s certificates.
pub fn driver_tls_args(pki: &Pki) -> Vec<String> {
    vec![
        "--etcd-ca".into(),
        pki.file("ca.pem"),
        "--etcd-cert".into(),
        pki.file("etcd-client.pem"),
        "--etcd-key".into(),
        pki.file("etcd-client-key.pem"),
    ]
}

impl EtcdCluster {
    /// One etcd member with TLS and client-certificate auth and, with
    /// `auth`, etcd's authentication (see the module header). Waits until
    /// it is healthy.
    pub async fn start_secure(
        cluster: &Cluster,
        pki: &Pki,
        auth: bool,
    ) -> (EtcdCluster, Option<EtcdUser>) {
        let (client_port, peer_port, metrics_port) = (free_port(), free_port(), free_port());
        let data_dir = cluster.root().join("etcd").join("etcd-0");
        std::fs::create_dir_all(&data_dir).expect("create etcd data dir");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let initial = format!("etcd-0={peer}");
        let token = format!("sluice-test-{}-{client_port}", std::process::id());
        let base = |client: &str| member_args("etcd-0", &data_dir, client, &peer, &initial, &token);
        let user = if auth {
            let plain = format!("http://127.0.0.1:{client_port}");
            let setup = Etcd {
                process: cluster.spawn("etcd-setup", &etcd_bin(), base(&plain)),
                name: "etcd-setup".into(),
                client_port,
                data_dir: data_dir.clone(),
                metrics_port: None,
            };
            setup.wait_healthy(ETCD_READY_TIMEOUT).await;
            let user = enable_auth(cluster, &setup.client_addr()).await;
            setup.kill();
            Some(user)
        } else {
            None
        };
        let mut args = base(&format!("https://127.0.0.1:{client_port}"));
        args.extend([
            "--cert-file".into(),
            pki.file("etcd.pem"),
            "--key-file".into(),
            pki.file("etcd-key.pem"),
            "--trusted-ca-file".into(),
            pki.file("ca.pem"),
            "--client-cert-auth".into(),
            "--listen-metrics-urls".into(),
            format!("http://127.0.0.1:{metrics_port}"),
        ]);
        let member = Etcd {
            process: cluster.spawn("etcd-0", &etcd_bin(), args),
            name: "etcd-0".into(),
            client_port,
            data_dir,
            metrics_port: Some(metrics_port),
        };
        member.wait_healthy(ETCD_READY_TIMEOUT).await;
        (
            EtcdCluster {
                members: vec![member],
            },
            user,
        )
    }
}

/// Creates `root` and `sluice` (readwrite on `/sluice/` only), enables
/// auth, and proves the restriction: `sluice` may write under `/sluice/`
/// and nowhere else.
async fn enable_auth(cluster: &Cluster, addr: &str) -> EtcdUser {
    let password = "sluice-test-password";
    let b64 = |s: &str| B64.encode(s);
    let calls = [
        ("/v3/auth/role/add", r#"{"name":"root"}"#.to_string()),
        (
            "/v3/auth/user/add",
            r#"{"name":"root","password":"root-pw"}"#.to_string(),
        ),
        (
            "/v3/auth/user/grant",
            r#"{"user":"root","role":"root"}"#.to_string(),
        ),
        ("/v3/auth/role/add", r#"{"name":"sluice"}"#.to_string()),
        (
            "/v3/auth/role/grant",
            format!(
                r#"{{"name":"sluice","perm":{{"permType":"READWRITE","key":"{}","range_end":"{}"}}}}"#,
                b64("/sluice/"),
                b64("/sluice0")
            ),
        ),
        (
            "/v3/auth/user/add",
            format!(r#"{{"name":"sluice","password":"{password}"}}"#),
        ),
        (
            "/v3/auth/user/grant",
            r#"{"user":"sluice","role":"sluice"}"#.to_string(),
        ),
        ("/v3/auth/enable", "{}".to_string()),
    ];
    for (path, body) in &calls {
        let (code, resp) = post(addr, path, &[], body).await;
        assert_eq!(code, 200, "{path}: {}", String::from_utf8_lossy(&resp));
    }
    let (_, resp) = post(
        addr,
        "/v3/auth/authenticate",
        &[],
        &format!(r#"{{"name":"sluice","password":"{password}"}}"#),
    )
    .await;
    let json: serde_json::Value =
        serde_json::from_slice(http::body(&resp)).expect("authenticate answer");
    let token = json["token"].as_str().expect("a token").to_string();
    let put = |key: &str| format!(r#"{{"key":"{}","value":"{}"}}"#, b64(key), b64("x"));
    let auth = [("Authorization", token.as_str())];
    let (inside, resp) = post(addr, "/v3/kv/put", &auth, &put("/sluice/probe")).await;
    assert_eq!(inside, 200, "{}", String::from_utf8_lossy(&resp));
    let (outside, resp) = post(addr, "/v3/kv/put", &auth, &put("/elsewhere")).await;
    let text = String::from_utf8_lossy(&resp).into_owned();
    assert!(
        outside != 200 && text.contains("permission denied"),
        "the sluice user may write outside /sluice/: {outside} {text}"
    );
    let file = cluster.root().join("etcd-password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    EtcdUser {
        user: "sluice".into(),
        password_file: file,
    }
}

async fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Vec<u8>) {
    http::post_json(addr, path, headers, body, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("POST {path} to etcd at {addr}: {e}"))
}
