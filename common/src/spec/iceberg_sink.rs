//! The Iceberg sink's spec (`sink.iceberg`): the catalog, the table's
//! namespace and name, where a table the query creates goes, and the data
//! files' size.
//!
//! Each batch appends its Parquet files to the table in one snapshot
//! whose summary records the query's id and the batch, so a batch run
//! again after a crash is never in the table twice (docs/design-notes.md,
//! "Exactly-once into an Iceberg table").

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use super::{DEFAULT_MAX_FILE_BYTES, DeltaCompactSpec};
use crate::error::{Error, Result};

/// The catalog name a SQL catalog's rows carry unless the spec names one.
pub const DEFAULT_CATALOG_NAME: &str = "default";

/// `sink.iceberg`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergSinkSpec {
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub catalog: IcebergCatalogSpec,
    /// Where a table the query creates goes: a local directory or
    /// `s3://bucket/prefix`; the table is `<warehouse>/<namespace>.db/<table>`.
    pub warehouse: String,
    /// The table's namespace (dotted for nested ones).
    pub namespace: String,
    pub table: String,
    /// A task starts a new data file once one reaches this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_file_bytes: Option<u64>,
    /// Rewrite the small files of recent batches into fewer files, as
    /// `sink.delta.compact` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact: Option<DeltaCompactSpec>,
}

/// `sink.iceberg.catalog`: the catalog that names the table's current
/// metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum IcebergCatalogSpec {
    /// The SQL catalog (`iceberg_tables`) in a SQLite file, as pyiceberg's
    /// `SqlCatalog` and Java's `JdbcCatalog` keep it.
    Sql(SqlCatalogSpec),
}

/// `sink.iceberg.catalog.sql`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlCatalogSpec {
    /// `sqlite:///<absolute path>` (or SQLAlchemy's `sqlite:////<path>`).
    pub uri: String,
    /// The catalog's name in its rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl SqlCatalogSpec {
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT_CATALOG_NAME)
    }

    /// The SQLite file the URI names, or why it names none.
    pub fn sqlite_path(&self) -> std::result::Result<&str, String> {
        let rest = self.uri.strip_prefix("sqlite://").ok_or_else(|| {
            format!(
                "{:?} is not a SQLite URI; expected sqlite:///<absolute path>",
                self.uri
            )
        })?;
        // SQLAlchemy writes an absolute path after a third slash.
        let path = rest
            .strip_prefix("//")
            .map_or(rest, |p| &rest[rest.len() - p.len() - 1..]);
        if !path.starts_with('/') || path.len() < 2 {
            return Err(format!(
                "{:?} names no absolute path; expected sqlite:///<absolute path>",
                self.uri
            ));
        }
        Ok(path)
    }
}

impl IcebergSinkSpec {
    pub fn target_file_bytes(&self) -> u64 {
        self.target_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES)
    }

    /// The SQL catalog's spec.
    pub fn sql(&self) -> &SqlCatalogSpec {
        let IcebergCatalogSpec::Sql(sql) = &self.catalog;
        sql
    }

    /// Where a table the query creates goes.
    pub fn new_location(&self) -> String {
        format!(
            "{}/{}.db/{}",
            self.warehouse.trim_end_matches('/'),
            self.namespace,
            self.table
        )
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        self.sql()
            .sqlite_path()
            .map_err(|r| Error::invalid("sink.iceberg.catalog.sql.uri", r))?;
        if self.sql().name.as_deref() == Some("") {
            return Err(Error::invalid("sink.iceberg.catalog.sql.name", "is empty"));
        }
        for (field, name) in [
            ("sink.iceberg.namespace", &self.namespace),
            ("sink.iceberg.table", &self.table),
        ] {
            let bad = name.is_empty()
                || name.starts_with('.')
                || name.ends_with('.')
                || name.contains("..")
                || name.contains(['/', '\\'])
                || name.chars().any(char::is_control);
            if bad || (field == "sink.iceberg.table" && name.contains('.')) {
                return Err(Error::invalid(
                    field,
                    format!("{name:?} is not a name (no slashes, no empty parts)"),
                ));
            }
        }
        if self
            .compact
            .as_ref()
            .is_some_and(|c| c.every_batches == Some(0))
        {
            return Err(Error::invalid(
                "sink.iceberg.compact.every_batches",
                "must be at least 1",
            ));
        }
        if self.target_file_bytes == Some(0) {
            return Err(Error::invalid(
                "sink.iceberg.target_file_bytes",
                "must be at least 1",
            ));
        }
        crate::storage::validate_location(&self.warehouse)
            .map_err(|reason| Error::invalid("sink.iceberg.warehouse", reason))
    }
}

impl From<&IcebergSinkSpec> for pb::IcebergSink {
    fn from(s: &IcebergSinkSpec) -> Self {
        let sql = s.sql();
        pb::IcebergSink {
            catalog: Some(pb::IcebergCatalog {
                kind: Some(pb::iceberg_catalog::Kind::Sql(pb::IcebergSqlCatalog {
                    uri: sql.uri.clone(),
                    name: sql.name.clone(),
                })),
            }),
            warehouse: s.warehouse.clone(),
            namespace: s.namespace.clone(),
            table: s.table.clone(),
            target_file_bytes: s.target_file_bytes,
            compact: s.compact.as_ref().map(|c| pb::DeltaCompact {
                every_batches: c.every_batches,
            }),
        }
    }
}

impl TryFrom<&pb::IcebergSink> for IcebergSinkSpec {
    type Error = Error;

    fn try_from(s: &pb::IcebergSink) -> Result<Self> {
        let catalog = match s.catalog.as_ref().and_then(|c| c.kind.as_ref()) {
            Some(pb::iceberg_catalog::Kind::Sql(sql)) => IcebergCatalogSpec::Sql(SqlCatalogSpec {
                uri: sql.uri.clone(),
                name: sql.name.clone(),
            }),
            None => {
                return Err(Error::invalid(
                    "sink.iceberg.catalog",
                    "missing; expected `sql`",
                ));
            }
        };
        Ok(IcebergSinkSpec {
            catalog,
            warehouse: s.warehouse.clone(),
            namespace: s.namespace.clone(),
            table: s.table.clone(),
            target_file_bytes: s.target_file_bytes,
            compact: s.compact.as_ref().map(|c| DeltaCompactSpec {
                every_batches: c.every_batches,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Result<IcebergSinkSpec> {
        let s: IcebergSinkSpec = serde_yaml_ng::from_str(yaml)
            .map_err(|e| Error::invalid("sink.iceberg", e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    const OK: &str = "{catalog: {sql: {uri: 'sqlite:///tmp/c.db'}}, warehouse: /tmp/wh, \
                      namespace: db, table: events, compact: {every_batches: 7}}";

    #[test]
    fn a_spec_survives_the_wire() {
        let s = spec(OK).unwrap();
        assert_eq!(s.sql().name(), "default");
        assert_eq!(s.sql().sqlite_path(), Ok("/tmp/c.db"));
        assert_eq!(s.new_location(), "/tmp/wh/db.db/events");
        let back = IcebergSinkSpec::try_from(&pb::IcebergSink::from(&s)).unwrap();
        assert_eq!(back, s);
        let alchemy = SqlCatalogSpec {
            uri: "sqlite:////var/c.db".into(),
            name: None,
        };
        assert_eq!(alchemy.sqlite_path(), Ok("/var/c.db"));
    }

    #[test]
    fn bad_fields_are_named() {
        let m = |yaml: &str| spec(yaml).unwrap_err().to_string();
        let with = |from: &str, to: &str| m(&OK.replace(from, to));
        let e = with("sqlite:///tmp/c.db", "sqlite://c.db");
        assert!(e.contains("sink.iceberg.catalog.sql.uri"), "{e}");
        let e = with("sqlite:///tmp/c.db", "postgresql://h/db");
        assert!(e.contains("not a SQLite URI"), "{e}");
        assert!(with("table: events", "table: a/b").contains("sink.iceberg.table"));
        assert!(with("table: events", "table: a.b").contains("sink.iceberg.table"));
        assert!(with("namespace: db", "namespace: 'a..b'").contains("sink.iceberg.namespace"));
        assert!(with("warehouse: /tmp/wh", "warehouse: ''").contains("sink.iceberg.warehouse"));
        let e = with("every_batches: 7", "every_batches: 0");
        assert!(e.contains("sink.iceberg.compact.every_batches"), "{e}");
        let e = with("{sql:", "{rest:");
        assert!(e.contains("rest") && e.contains("sql"), "{e}");
        let e = m(&format!("{}, partition_by: [day]}}", &OK[..OK.len() - 1]));
        assert!(e.contains("partition_by"), "{e}");
    }
}
