//! Where a submitted query's files may be: every source, table and sink
//! location under the driver's allowed paths (`--allowed-paths`, or else
//! the data directory), compared lexically and, for local paths, with their
//! symbolic links followed as far as they exist at submit. A link can
//! appear later: the source and table planners check each file they
//! discover (`source::check_allowed`), and confining executors check each
//! task again when they run it.

use sluice_common::spec::{QuerySpec, SinkSpec, SourceSpec};
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
    if let SinkSpec::Files(sink) = &spec.sink {
        out.push(Named {
            field: "sink.files.path".into(),
            location: sink.path.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
