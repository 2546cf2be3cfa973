//! Where a submitted query's files may be: every source, table and sink
//! location under the driver's allowed paths (`--allowed-paths`, or else
//! the data directory), compared lexically and, for local paths, with their
//! symbolic links followed as far as they exist at submit. A link can
//! appear later: the source and table planners check each file they
//! discover (`source::check_allowed`), and confining executors check each
//! task again when they run it.
//!
//! The Kafka settings' files and password variable are confined apart, to
//! the driver's [`Secrets`] (`--secrets-dir`, `--secret-env-prefix`):
//! [`check_secrets`] refuses a spec that names another, before any is read.

use sluice_common::secrets::Secrets;
use sluice_common::spec::{KafkaSecurity, QuerySpec, SourceSpec};
use sluice_common::storage::AllowedPaths;

use crate::error::DriverError;

/// A location of a spec: its field, where it is, and whether it is an
/// input (a file or a directory the query reads).
struct Named {
    field: String,
    location: String,
    input: bool,
}

/// Every location `spec` names, in the order of its fields.
fn locations(spec: &QuerySpec) -> Vec<Named> {
    let mut out = Vec::new();
    for input in spec.inputs() {
        if let SourceSpec::Files(f) = input.source {
            let field = match spec.source {
                Some(_) => "source.files.path".to_string(),
                None => format!("sources.{}.files.path", input.name),
            };
            out.push(Named {
                field,
                location: f.path.clone(),
                input: true,
            });
        }
    }
    for (name, t) in &spec.tables {
        out.push(Named {
            field: format!("tables.{name}.path"),
            location: t.path.clone(),
            input: true,
        });
    }
    if let Some((field, path)) = spec.sink_location() {
        out.push(Named {
            field: field.into(),
            location: path.to_string(),
            input: false,
        });
    }
    if let Some((field, file)) = spec.sink_catalog_file() {
        out.push(Named {
            field: field.into(),
            location: file.to_string(),
            input: false,
        });
    }
    out
}

/// Refuses, with `INVALID_ARGUMENT` naming the field and the allowed
/// paths, a spec that names a place outside them. For a local input
/// directory, the symbolic links directly inside it are followed too.
pub async fn check(allowed: &AllowedPaths, spec: &QuerySpec) -> Result<(), DriverError> {
    let allowed = allowed.clone();
    let named = locations(spec);
    tokio::task::spawn_blocking(move || {
        for n in &named {
            let checked = if n.input {
                allowed.check_input_resolved(&n.field, &n.location)
            } else {
                allowed.check_resolved(&n.field, &n.location)
            };
            checked.map_err(DriverError::Invalid)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| DriverError::Internal(format!("the check of the spec's paths panicked: {e}")))?
}

/// Every Kafka security setting of `spec`, with its field.
fn kafka_settings(spec: &QuerySpec) -> Vec<(String, &KafkaSecurity)> {
    let mut out = Vec::new();
    for input in spec.inputs() {
        if let SourceSpec::Kafka(k) = input.source {
            let field = match spec.source {
                Some(_) => "source.kafka.security".to_string(),
                None => format!("sources.{}.kafka.security", input.name),
            };
            out.push((field, &k.security));
        }
    }
    if let Some((field, security)) = spec.sink_security() {
        out.push((field.into(), security));
    }
    out
}

/// Refuses, with `INVALID_ARGUMENT` naming the field and the flag, a spec
/// whose Kafka settings name a file or a variable that `secrets` does not
/// allow. Pure: the files are read when the driver connects, right after.
pub fn check_secrets(secrets: &Secrets, spec: &QuerySpec) -> Result<(), DriverError> {
    for (field, security) in kafka_settings(spec) {
        security
            .check_secrets(&field, secrets)
            .map_err(|e| DriverError::Invalid(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_iceberg_sinks_catalog_and_warehouse_must_both_be_allowed() {
        let spec = |catalog: &str| {
            let yaml = format!(
                "name: q\nsource: {{rate: {{rows_per_second: 10, partitions: 1}}}}\n\
                 sink: {{iceberg: {{catalog: {{sql: {{uri: 'sqlite://{catalog}'}}}}, \
                 warehouse: /data/wh, namespace: n, table: t}}}}\n"
            );
            QuerySpec::parse(&yaml).unwrap()
        };
        let allowed = AllowedPaths::parse(&["/data"]).unwrap();
        check(&allowed, &spec("/data/c.db"))
            .await
            .expect("both allowed");
        let e = check(&allowed, &spec("/etc/c.db"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("sink.iceberg.catalog.sql.uri"), "{e}");
    }

    #[test]
    fn kafka_secrets_are_checked_by_their_field() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::new(Some(dir.path()), &["KAFKA_"]).unwrap();
        let security = |file: &str| {
            format!(
                "{{protocol: sasl_plaintext, sasl_mechanism: PLAIN, sasl_username: u, \
                 sasl_password_{file}}}"
            )
        };
        let spec = |source: &str, sink: &str| {
            QuerySpec::parse(&format!(
                "name: q\nsources:\n  clicks:\n    kafka: {{bootstrap_servers: 'b:9092', topic: t, \
                 schema: [{{name: v, type: bigint}}], security: {source}}}\n\
                 sql: SELECT v FROM clicks\n\
                 sink:\n  kafka: {{bootstrap_servers: 'b:9092', topic: o, security: {sink}}}\n"
            ))
            .unwrap()
        };
        let ok = spec(&security("file: pw"), &security("env: KAFKA_PW"));
        check_secrets(&secrets, &ok).unwrap();
        for (bad, field) in [
            (
                spec(&security("file: /etc/hostname"), &security("env: KAFKA_PW")),
                "sources.clicks.kafka.security.sasl_password_file",
            ),
            (
                spec(&security("file: pw"), &security("env: SLUICE_DRIVER")),
                "sink.kafka.security.sasl_password_env",
            ),
        ] {
            let err = check_secrets(&secrets, &bad).unwrap_err();
            assert!(matches!(err, DriverError::Invalid(_)), "{err:?}");
            assert!(err.to_string().contains(field), "{err}");
        }
        let err = check_secrets(&Secrets::default(), &ok).unwrap_err();
        assert!(
            err.to_string()
                .contains("sources.clicks.kafka.security.sasl_password_file")
                && err.to_string().contains("--secrets-dir"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn every_path_of_a_spec_is_checked_by_its_field() {
        let spec = |source: &str, table: &str, sink: &str| {
            QuerySpec::parse(&format!(
                "name: q\nsource:\n  files: {{path: {source}, format: parquet}}\n\
                 tables:\n  t: {{path: {table}, format: parquet}}\n\
                 sink:\n  files: {{path: {sink}}}\n"
            ))
            .unwrap()
        };
        let allowed = AllowedPaths::parse(&["/data", "s3://b/out"]).unwrap();
        let ok = spec("/data/in", "/data/t.parquet", "s3://b/out/q");
        check(&allowed, &ok).await.unwrap();
        for (bad, field) in [
            (spec("/in", "/data/t", "/data/o"), "source.files.path"),
            (spec("/data/in", "/t", "/data/o"), "tables.t.path"),
            (
                spec("/data/in", "/data/t", "s3://b/out-2"),
                "sink.files.path",
            ),
            (spec("/data/in", "/data/t", "/data/../o"), "sink.files.path"),
        ] {
            let err = check(&allowed, &bad).await.unwrap_err();
            assert!(matches!(err, DriverError::Invalid(_)), "{err:?}");
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("{field}: ")) && msg.contains("[/data, s3://b/out]"),
                "{msg}"
            );
        }
    }
}
