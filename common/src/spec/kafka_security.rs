//! How the Kafka source and sink reach a secured cluster
//! (`source.kafka.security`, `sink.kafka.security`): TLS with a CA and a
//! client certificate, SASL PLAIN or SCRAM.
//!
//! The spec names where secrets are, never the secrets: the SASL password
//! is read from a file or an environment variable by each process that
//! connects (the driver and every executor), when it connects. So the spec
//! as stored in the checkpoint, shown by `sluice get` and logged holds no
//! secret. Certificates and keys are files too. Which files and variables
//! a spec may name is the operator's [`Secrets`] (`--secrets-dir`,
//! `--secret-env-prefix`): the driver checks them at submit, and every
//! process checks them again when it reads them.

use serde::{Deserialize, Serialize};
use sluice_proto as pb;
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::secrets::Secrets;

/// Kafka's `security.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "" | "plaintext" => SecurityProtocol::Plaintext,
            "ssl" => SecurityProtocol::Ssl,
            "sasl_plaintext" => SecurityProtocol::SaslPlaintext,
            "sasl_ssl" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// A SASL mechanism, by its Kafka name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            _ => return None,
        })
    }
}

/// `security:` of a Kafka source or sink.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSecurity {
    #[serde(default)]
    pub protocol: SecurityProtocol,
    /// TLS: the CA certificate (PEM file) that signed the brokers'
    /// certificates; absent, the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_ca: Option<String>,
    /// TLS: a client certificate (PEM file, with its chain) and its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_key: Option<String>,
    /// SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<SaslMechanism>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    /// SASL: a file holding the password (one line), or an environment
    /// variable holding it; exactly one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_password_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_password_env: Option<String>,
}

impl KafkaSecurity {
    /// Checks the settings fit the protocol; `field` is where they are
    /// (`source.kafka.security`).
    pub fn validate(&self, field: &str) -> Result<()> {
        let bad = |f: &str, why: &str| Err(Error::invalid(format!("{field}.{f}"), why));
        let p = self.protocol;
        let tls_set =
            self.ssl_ca.is_some() || self.ssl_certificate.is_some() || self.ssl_key.is_some();
        if tls_set && !p.tls() {
            return bad(
                "protocol",
                "ssl_ca, ssl_certificate and ssl_key need protocol ssl or sasl_ssl",
            );
        }
        if self.ssl_certificate.is_some() != self.ssl_key.is_some() {
            return bad("ssl_key", "give ssl_certificate and ssl_key together");
        }
        let sasl_set = self.sasl_mechanism.is_some()
            || self.sasl_username.is_some()
            || self.sasl_password_file.is_some()
            || self.sasl_password_env.is_some();
        if sasl_set && !p.sasl() {
            return bad(
                "protocol",
                "the sasl_ settings need protocol sasl_plaintext or sasl_ssl",
            );
        }
        if p.sasl() {
            if self.sasl_mechanism.is_none() {
                return bad(
                    "sasl_mechanism",
                    "required with SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                );
            }
            if self.sasl_username.as_deref().is_none_or(str::is_empty) {
                return bad("sasl_username", "required with SASL");
            }
            match (&self.sasl_password_file, &self.sasl_password_env) {
                (Some(_), Some(_)) | (None, None) => {
                    return bad(
                        "sasl_password_file",
                        "give exactly one of sasl_password_file and sasl_password_env \
                         (the password itself never goes in the spec)",
                    );
                }
                _ => {}
            }
        }
        for (f, v) in [
            ("ssl_ca", &self.ssl_ca),
            ("ssl_certificate", &self.ssl_certificate),
            ("ssl_key", &self.ssl_key),
            ("sasl_password_file", &self.sasl_password_file),
            ("sasl_password_env", &self.sasl_password_env),
        ] {
            if v.as_deref().is_some_and(str::is_empty) {
                return bad(f, "must not be empty");
            }
        }
        Ok(())
    }

    /// Checks that the files and the variable the settings name are ones
    /// `secrets` lets a spec name (by their words: see
    /// [`Secrets::check_file`]). Pure.
    pub fn check_secrets(&self, field: &str, secrets: &Secrets) -> Result<()> {
        for (f, path) in self.files() {
            secrets.check_file(&format!("{field}.{f}"), path)?;
        }
        if let Some(var) = &self.sasl_password_env {
            secrets.check_env(&format!("{field}.sasl_password_env"), var)?;
        }
        Ok(())
    }

    /// The files the settings name, by field.
    fn files(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("ssl_ca", &self.ssl_ca),
            ("ssl_certificate", &self.ssl_certificate),
            ("ssl_key", &self.ssl_key),
            ("sasl_password_file", &self.sasl_password_file),
        ]
        .into_iter()
        .filter_map(|(f, v)| Some((f, v.as_deref()?)))
    }

    /// The SASL password, from its file or environment variable as
    /// `secrets` allows; an error names the field and the file or the
    /// variable, never the password.
    pub fn sasl_password(
        &self,
        field: &str,
        secrets: &Secrets,
    ) -> Result<Option<Zeroizing<String>>> {
        if let Some(path) = &self.sasl_password_file {
            let f = format!("{field}.sasl_password_file");
            let bytes = secrets.read_file(&f, path)?;
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| Error::invalid(&f, format!("{path} is not UTF-8 text")))?;
            return Ok(Some(Zeroizing::new(
                text.trim_end_matches(['\r', '\n']).to_string(),
            )));
        }
        if let Some(var) = &self.sasl_password_env {
            let f = format!("{field}.sasl_password_env");
            return secrets.read_env(&f, var).map(Some);
        }
        Ok(None)
    }

    pub fn is_plaintext(&self) -> bool {
        *self == KafkaSecurity::default()
    }
}

impl From<&KafkaSecurity> for pb::KafkaSecurity {
    fn from(s: &KafkaSecurity) -> Self {
        pb::KafkaSecurity {
            protocol: s.protocol.as_str().to_string(),
            ssl_ca: s.ssl_ca.clone(),
            ssl_certificate: s.ssl_certificate.clone(),
            ssl_key: s.ssl_key.clone(),
            sasl_mechanism: s.sasl_mechanism.map(|m| m.as_str().to_string()),
            sasl_username: s.sasl_username.clone(),
            sasl_password_file: s.sasl_password_file.clone(),
            sasl_password_env: s.sasl_password_env.clone(),
        }
    }
}

impl KafkaSecurity {
    /// From the proto message; `field` names it in errors.
    pub fn from_proto(p: Option<&pb::KafkaSecurity>, field: &str) -> Result<Self> {
        let Some(p) = p else {
            return Ok(KafkaSecurity::default());
        };
        Ok(KafkaSecurity {
            protocol: SecurityProtocol::parse(&p.protocol).ok_or_else(|| {
                Error::invalid(
                    format!("{field}.protocol"),
                    format!(
                        "unknown protocol {:?}; expected plaintext, ssl, sasl_plaintext or sasl_ssl",
                        p.protocol
                    ),
                )
            })?,
            ssl_ca: p.ssl_ca.clone(),
            ssl_certificate: p.ssl_certificate.clone(),
            ssl_key: p.ssl_key.clone(),
            sasl_mechanism: match p.sasl_mechanism.as_deref() {
                None => None,
                Some(m) => Some(SaslMechanism::parse(m).ok_or_else(|| {
                    Error::invalid(
                        format!("{field}.sasl_mechanism"),
                        format!("unknown mechanism {m:?}; expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
                    )
                })?),
            },
            sasl_username: p.sasl_username.clone(),
            sasl_password_file: p.sasl_password_file.clone(),
            sasl_password_env: p.sasl_password_env.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> KafkaSecurity {
        serde_yaml_ng::from_str(yaml).expect("parses")
    }

    #[test]
    fn settings_must_fit_the_protocol() {
        let err = |yaml: &str| {
            parse(yaml)
                .validate("sink.kafka.security")
                .unwrap_err()
                .to_string()
        };
        assert!(err("{ssl_ca: /ca.pem}").contains("sink.kafka.security.protocol"));
        assert!(
            err("{protocol: sasl_ssl, sasl_username: u, sasl_password_env: P}")
                .contains("sasl_mechanism")
        );
        assert!(
            err("{protocol: sasl_plaintext, sasl_mechanism: PLAIN, sasl_username: u}")
                .contains("exactly one")
        );
        assert!(err("{protocol: ssl, ssl_certificate: /c.pem}").contains("ssl_key"));
        let ok = parse(
            "{protocol: sasl_ssl, ssl_ca: /ca.pem, sasl_mechanism: SCRAM-SHA-512, sasl_username: u, sasl_password_file: /p}",
        );
        ok.validate("f").unwrap();
        let back = KafkaSecurity::from_proto(Some(&pb::KafkaSecurity::from(&ok)), "f").unwrap();
        assert_eq!(back, ok);
        assert!(KafkaSecurity::default().is_plaintext());
        assert!(serde_yaml_ng::from_str::<KafkaSecurity>("{sasl_password: x}").is_err());
    }

    #[test]
    fn the_password_comes_from_its_file_or_variable_and_errors_name_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "s3cret\n").unwrap();
        let secrets = Secrets::new(Some(dir.path()), &["TEST_KAFKA_"]).unwrap();
        let s = KafkaSecurity {
            sasl_password_file: Some("pw".into()),
            ..Default::default()
        };
        let pw = s.sasl_password("f", &secrets).unwrap().unwrap();
        assert_eq!(pw.as_str(), "s3cret");
        let e = s
            .sasl_password("f", &Secrets::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.sasl_password_file") && e.contains("--secrets-dir"),
            "{e}"
        );
        let s = KafkaSecurity {
            sasl_password_env: Some("TEST_KAFKA_NO_SUCH_VARIABLE_X".into()),
            ..Default::default()
        };
        let e = s.sasl_password("f", &secrets).unwrap_err().to_string();
        assert!(
            e.contains("TEST_KAFKA_NO_SUCH_VARIABLE_X") && e.contains("f.sasl_password_env"),
            "{e}"
        );
    }

    #[test]
    fn every_file_and_the_variable_are_checked_against_the_secrets_policy() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::new(Some(dir.path()), &["KAFKA_"]).unwrap();
        let inside = parse(
            "{protocol: sasl_ssl, ssl_ca: ca.pem, ssl_certificate: c.pem, ssl_key: k.pem, \
             sasl_mechanism: PLAIN, sasl_username: u, sasl_password_env: KAFKA_PW}",
        );
        inside
            .check_secrets("sink.kafka.security", &secrets)
            .unwrap();
        let field_of = |s: &KafkaSecurity| match s.check_secrets("source.kafka.security", &secrets)
        {
            Err(Error::InvalidSpec { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        };
        for (f, bad) in [
            ("ssl_ca", "/etc/ssl/certs/ca-certificates.crt"),
            ("ssl_certificate", "../c.pem"),
            ("ssl_key", "/etc/shadow"),
            ("sasl_password_file", "/etc/hostname"),
        ] {
            let mut s = inside.clone();
            let slot = match f {
                "ssl_ca" => &mut s.ssl_ca,
                "ssl_certificate" => &mut s.ssl_certificate,
                "ssl_key" => &mut s.ssl_key,
                _ => &mut s.sasl_password_file,
            };
            *slot = Some(bad.into());
            assert_eq!(field_of(&s), format!("source.kafka.security.{f}"));
        }
        let s = KafkaSecurity {
            sasl_password_env: Some("SLUICE_DRIVER".into()),
            ..inside
        };
        assert_eq!(field_of(&s), "source.kafka.security.sasl_password_env");
    }
}
