//! `sluice certs init DIR` and `sluice token new`: the certificates and
//! tokens of a secured cluster, for development and tests. Production
//! clusters get their certificates from a CA such as cert-manager (see
//! `deploy/k8s/cert-manager` and deploy/README.md).
//!
//! ```text
//!  DIR/ca.pem                      the CA: signs everything below
//!      ca-key.pem                  its key: keep it apart, or delete it
//!      driver.pem, driver-key.pem  the drivers' server certificate (--tls-cert/--tls-key)
//!      executor.pem, -key.pem      OU=executor: executors' client certificate
//!      client.pem, client-key.pem  OU=admin: a CLI client certificate
//!      etcd.pem, etcd-key.pem      etcd's server certificate
//!      etcd-client.pem, -key.pem   CN=sluice: the drivers' certificate towards etcd
//!      tokens.yaml                 --auth-tokens: the hashes of the three tokens
//!      admin.token, viewer.token, executor.token
//! ```
//!
//! Files are created, never overwritten; keys are readable by their owner
//! only.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use sluice_driver::auth::tokens::{hash_token, new_token};

/// The hosts every server certificate names.
const LOCAL_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// Options of `sluice certs init`.
#[derive(Debug, Clone, clap::Args)]
pub struct InitArgs {
    /// The directory to write to (created; existing files are not replaced).
    pub dir: PathBuf,
    /// Another name or IP of the drivers (repeatable), besides localhost.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Another name or IP of etcd (repeatable), besides localhost.
    #[arg(long = "etcd-host")]
    pub etcd_hosts: Vec<String>,
    /// Days the certificates stay valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

/// One certificate and its key, in PEM.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// What a leaf certificate is for.
enum Use {
    Server,
    Client,
    Both,
}

/// `sluice certs init`: writes the files and prints the directory.
pub fn init(args: &InitArgs) -> anyhow::Result<()> {
    write(args)?;
    println!("{}", args.dir.display());
    Ok(())
}

/// Writes the CA, the certificates and the tokens into `args.dir`.
pub fn write(args: &InitArgs) -> anyhow::Result<()> {
    if args.days == 0 {
        anyhow::bail!("--days must be at least 1");
    }
    std::fs::create_dir_all(&args.dir)?;
    let (not_before, not_after) = validity(args.days);
    let (ca, ca_pem, ca_key) = new_ca("Sluice development CA", not_before, not_after)?;
    let hosts = |extra: &[String]| -> Vec<String> {
        LOCAL_HOSTS
            .iter()
            .map(|h| h.to_string())
            .chain(extra.iter().cloned())
            .collect()
    };
    let leaf = |cn: &str, ou: Option<&str>, sans: Vec<String>, usage: Use| {
        new_leaf(&ca, cn, ou, sans, usage, not_before, not_after)
    };
    let files = [
        (
            "driver",
            leaf("sluice-driver", None, hosts(&args.hosts), Use::Server)?,
        ),
        (
            "executor",
            leaf("executor", Some("executor"), vec![], Use::Client)?,
        ),
        ("client", leaf("admin", Some("admin"), vec![], Use::Client)?),
        (
            "etcd",
            leaf("etcd", None, hosts(&args.etcd_hosts), Use::Both)?,
        ),
        ("etcd-client", leaf("sluice", None, vec![], Use::Client)?),
    ];
    let dir = &args.dir;
    write_new(&dir.join("ca.pem"), &ca_pem, false)?;
    write_new(&dir.join("ca-key.pem"), &ca_key, true)?;
    for (name, pem) in &files {
        write_new(&dir.join(format!("{name}.pem")), &pem.cert, false)?;
        write_new(&dir.join(format!("{name}-key.pem")), &pem.key, true)?;
    }
    let mut yaml = String::from("tokens:\n");
    for role in ["admin", "viewer", "executor"] {
        let token = new_token();
        write_new(
            &dir.join(format!("{role}.token")),
            &format!("{token}\n"),
            true,
        )?;
        yaml.push_str(&entry(role, role, &token));
    }
    write_new(&dir.join("tokens.yaml"), &yaml, false)?;
    Ok(())
}

/// `sluice token new`: prints a fresh token on stdout and its token-file
/// entry on stderr.
pub fn new(role: &str, name: Option<&str>) -> anyhow::Result<()> {
    if sluice_driver::auth::Role::parse(role).is_none() {
        anyhow::bail!("--role must be admin, viewer or executor, got {role:?}");
    }
    let token = new_token();
    println!("{token}");
    eprint!(
        "add to the --auth-tokens file:\n{}",
        entry(name.unwrap_or(role), role, &token)
    );
    Ok(())
}

fn entry(name: &str, role: &str, token: &str) -> String {
    format!(
        "  - name: {name}\n    role: {role}\n    sha256: {}\n",
        hash_token(token)
    )
}

/// A CA certificate valid between the two dates.
pub fn new_ca(
    name: &str,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> anyhow::Result<(CertifiedIssuer<'static, KeyPair>, String, String)> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (params.not_before, params.not_after) = (not_before, not_after);
    let key = KeyPair::generate()?;
    let key_pem = key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(params, key)?;
    let pem = ca.pem();
    Ok((ca, pem, key_pem))
}

fn new_leaf(
    ca: &Issuer<'_, KeyPair>,
    cn: &str,
    ou: Option<&str>,
    sans: Vec<String>,
    usage: Use,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> anyhow::Result<Pem> {
    let mut params = CertificateParams::new(sans)?;
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(ou) = ou {
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, ou);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = match usage {
        Use::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
        Use::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        Use::Both => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    (params.not_before, params.not_after) = (not_before, not_after);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// From a day ago (clocks differ) to `days` from now.
fn validity(days: u32) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (
        now - time::Duration::days(1),
        now + time::Duration::days(i64::from(days)),
    )
}

fn write_new(path: &Path, text: &str, secret: bool) -> anyhow::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut f = opts.open(path).map_err(|e| {
        anyhow::anyhow!("{}: {e} (certs init never replaces a file)", path.display())
    })?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_every_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let args = InitArgs {
            dir: dir.path().join("certs"),
            hosts: vec!["sluice-driver".into()],
            etcd_hosts: vec![],
            days: 30,
        };
        init(&args).unwrap();
        for f in [
            "ca.pem",
            "driver.pem",
            "driver-key.pem",
            "executor.pem",
            "client-key.pem",
            "etcd.pem",
            "etcd-client.pem",
            "tokens.yaml",
            "admin.token",
            "viewer.token",
        ] {
            assert!(args.dir.join(f).is_file(), "{f}");
        }
        let tokens = std::fs::read_to_string(args.dir.join("tokens.yaml")).unwrap();
        let admin = std::fs::read_to_string(args.dir.join("admin.token")).unwrap();
        assert!(tokens.contains(&hash_token(admin.trim())));
        assert!(!tokens.contains(admin.trim()));
        let e = init(&args).unwrap_err().to_string();
        assert!(e.contains("ca.pem") && e.contains("never replaces"), "{e}");
    }
}
