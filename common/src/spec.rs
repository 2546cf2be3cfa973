//! The query spec: what a user submits, in YAML, JSON or as the proto
//! message. Parsing rejects unknown fields by name; [`QuerySpec::validate`]
//! checks every range and names the field that is out of it.

mod delta_sink;
mod files;
mod iceberg_sink;
mod inputs;
mod kafka;
mod kafka_security;
mod kafka_sink;
mod nexmark;
mod state;
mod tables;
mod text;

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use crate::error::{Error, Result};
pub use delta_sink::{DEFAULT_COMPACT_EVERY_BATCHES, DeltaCompactSpec, DeltaMode, DeltaSinkSpec};
pub use files::{
    COLUMN_TYPES, ColumnSpec, CsvOptions, FileSourceSpec, Format, MAX_FILES_PER_BATCH, OnBadRecord,
    column_type, declared_schema,
};
pub use iceberg_sink::{DEFAULT_CATALOG_NAME, IcebergCatalogSpec, IcebergSinkSpec, SqlCatalogSpec};
pub use inputs::{INPUT, Input, MAX_SOURCES};
pub use kafka::{
    EARLIEST, Isolation, KAFKA_COLUMNS, KafkaFormat, KafkaSourceSpec, LATEST,
    MAX_RECORDS_PER_PARTITION, StartingOffsets, kafka_schema, parse_servers,
};
pub use kafka_security::{KafkaSecurity, SaslMechanism, SecurityProtocol};
pub use kafka_sink::{
    DEFAULT_TRANSACTION_TIMEOUT_MS, Delivery, KafkaSinkSpec, MAX_TRANSACTION_TIMEOUT_MS,
    SinkRecordFormat,
};
pub use nexmark::{DEFAULT_BASE_TIME_MS, MAX_BASE_TIME_MS, NexmarkSpec, NexmarkTable};
pub use state::{
    DEFAULT_MAX_STATE_BYTES, DEFAULT_SNAPSHOT_INTERVAL, DEFAULT_STATE_PARTITIONS, DedupSpec,
    MAX_STATE_PARTITIONS, MAX_STATE_TTL_MS, OutputMode, WatermarkSpec,
};
pub use tables::{TableSpec, validate_table, validate_table_name};

pub const MAX_PARTITIONS: u32 = 1024;
pub const MAX_ROWS_PER_SECOND: u64 = 1_000_000_000_000;
pub const MAX_INTERVAL_MS: u64 = 86_400_000;
/// The largest spec, as text or encoded, that a driver accepts (1 MiB).
pub const MAX_SPEC_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuerySpec {
    pub name: String,
    /// The one input stream, the table `input`; a query has this or
    /// `sources`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "serde_yaml_ng::with::singleton_map"
    )]
    pub source: Option<SourceSpec>,
    /// Several input streams, each a table of the SQL, by name.
    #[serde(
        default,
        skip_serializing_if = "std::collections::BTreeMap::is_empty",
        with = "serde_yaml_ng::with::singleton_map_recursive"
    )]
    pub sources: std::collections::BTreeMap<String, SourceSpec>,
    #[serde(default)]
    pub trigger: TriggerSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rows_per_batch: Option<u64>,
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub sink: SinkSpec,
    /// The query over the table `input`; `None` means [`DEFAULT_SQL`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// Static tables the SQL may join `input` with, by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tables: std::collections::BTreeMap<String, TableSpec>,
    /// Which rows each batch emits; `None` means the query's default
    /// ([`OutputMode::effective`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_mode: Option<OutputMode>,
    /// A stateful query's shuffle buckets and state partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_partitions: Option<u32>,
    /// A state snapshot every this many batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_interval: Option<u64>,
    /// The most bytes of a stateful query's state, over all its partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_state_bytes: Option<u64>,
    /// How long a key of an aggregation without a window, or of a join
    /// without a bound, stays in the state without an update: event time
    /// with a watermark, else processing time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl_ms: Option<u64>,
    /// Event time and how late a row may be, for `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<WatermarkSpec>,
    /// Event time and how late a row may be, for each of `sources` that
    /// has one.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub watermarks: std::collections::BTreeMap<String, WatermarkSpec>,
    /// Drop duplicate output rows within a span of event time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<DedupSpec>,
}

/// The query of a spec without `sql`.
pub const DEFAULT_SQL: &str = "SELECT * FROM input";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceSpec {
    Rate(RateSpec),
    Files(FileSourceSpec),
    Kafka(KafkaSourceSpec),
    Nexmark(NexmarkSpec),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    pub partitions: u32,
    pub rows_per_second: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_rows: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    #[serde(default)]
    pub interval_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SinkSpec {
    Files(FileSinkSpec),
    /// Records of a Kafka topic.
    Kafka(KafkaSinkSpec),
    /// Counts rows and bytes and writes nothing.
    Discard(DiscardSinkSpec),
    /// A Delta Lake table.
    Delta(DeltaSinkSpec),
    /// An Apache Iceberg table.
    Iceberg(IcebergSinkSpec),
}

/// `sink: {discard: {}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscardSinkSpec {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkSpec {
    pub path: String,
    #[serde(default = "default_format")]
    pub format: String,
    /// Output columns whose values name Hive-style directories
    /// (`col=value/`); they are not written inside the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_by: Vec<String>,
    /// A task starts a new file once one reaches this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_bytes: Option<u64>,
}

/// The default of `sink.files.max_file_bytes`.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 128 << 20;

impl FileSinkSpec {
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES)
    }
}

/// Refuses a spec of `size` bytes over [`MAX_SPEC_BYTES`], naming `field`.
pub fn check_size(field: &str, size: usize) -> Result<()> {
    if size > MAX_SPEC_BYTES {
        return Err(Error::invalid(
            field,
            format!("the spec is {size} bytes; the limit is {MAX_SPEC_BYTES} bytes (1 MiB)"),
        ));
    }
    Ok(())
}

fn default_format() -> String {
    "jsonl".to_string()
}

impl QuerySpec {
    /// Parses YAML or JSON text and validates it.
    pub fn parse(text: &str) -> Result<Self> {
        check_size("spec_text", text.len())?;
        let spec: QuerySpec = text::deserialize(text)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks every field's range. The error names the first bad field.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        inputs::validate(self)?;
        if self.trigger.interval_ms > MAX_INTERVAL_MS {
            return Err(Error::invalid(
                "trigger.interval_ms",
                format!(
                    "must be at most {MAX_INTERVAL_MS}, got {}",
                    self.trigger.interval_ms
                ),
            ));
        }
        if self.sql.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(Error::invalid(
                "sql",
                "must not be empty; leave it out for SELECT * FROM input",
            ));
        }
        for (name, t) in &self.tables {
            validate_table(name, t)?;
        }
        state::validate(
            self.state_partitions,
            self.snapshot_interval,
            self.max_state_bytes,
        )?;
        state::validate_ttl(self.state_ttl_ms)?;
        if let Some(d) = &self.dedup {
            d.validate()?;
            if self.watermark.is_none() {
                return Err(Error::invalid(
                    "dedup",
                    "needs a watermark (watermark: {column, delay_ms}), which bounds the keys it remembers",
                ));
            }
        }
        if self.max_rows_per_batch == Some(0) {
            return Err(Error::invalid("max_rows_per_batch", "must be at least 1"));
        }
        match &self.sink {
            SinkSpec::Files(f) => {
                if Format::parse(&f.format).is_none() {
                    return Err(Error::invalid(
                        "sink.files.format",
                        format!(
                            "unsupported format {:?}; supported: jsonl, csv, parquet",
                            f.format
                        ),
                    ));
                }
                if f.max_file_bytes == Some(0) {
                    return Err(Error::invalid(
                        "sink.files.max_file_bytes",
                        "must be at least 1",
                    ));
                }
                for (i, c) in f.partition_by.iter().enumerate() {
                    if c.is_empty() || f.partition_by[..i].contains(c) {
                        return Err(Error::invalid(
                            format!("sink.files.partition_by[{i}]"),
                            format!("{c:?} is empty or named twice"),
                        ));
                    }
                }
                crate::storage::validate_location(&f.path)
                    .map_err(|reason| Error::invalid("sink.files.path", reason))?;
            }
            SinkSpec::Kafka(k) => k.validate()?,
            SinkSpec::Delta(d) => d.validate()?,
            SinkSpec::Iceberg(i) => i.validate()?,
            SinkSpec::Discard(_) => {}
        }
        Ok(())
    }

    /// Rate source settings, when the one source is `rate`.
    pub fn rate(&self) -> Option<&RateSpec> {
        match &self.source {
            Some(SourceSpec::Rate(r)) => Some(r),
            _ => None,
        }
    }

    /// The query's SQL.
    pub fn sql(&self) -> &str {
        self.sql.as_deref().unwrap_or(DEFAULT_SQL)
    }

    /// The state partitions of a stateful query.
    pub fn state_partitions(&self) -> u32 {
        self.state_partitions.unwrap_or(DEFAULT_STATE_PARTITIONS)
    }

    /// How often a stateful query's state is snapshotted, in batches.
    pub fn snapshot_interval(&self) -> u64 {
        self.snapshot_interval.unwrap_or(DEFAULT_SNAPSHOT_INTERVAL)
    }

    /// The most bytes of a stateful query's state.
    pub fn max_state_bytes(&self) -> u64 {
        self.max_state_bytes.unwrap_or(DEFAULT_MAX_STATE_BYTES)
    }

    /// The sink location; `None` for a sink that writes no files.
    pub fn sink_path(&self) -> Option<&str> {
        self.sink_location().map(|(_, path)| path)
    }

    /// The sink location with the field that sets it.
    pub fn sink_location(&self) -> Option<(&'static str, &str)> {
        match &self.sink {
            SinkSpec::Files(f) => Some(("sink.files.path", &f.path)),
            SinkSpec::Delta(d) => Some(("sink.delta.path", &d.path)),
            SinkSpec::Iceberg(i) => Some(("sink.iceberg.warehouse", &i.warehouse)),
            SinkSpec::Kafka(_) | SinkSpec::Discard(_) => None,
        }
    }

    /// A file the sink reads and writes beside its location, with its
    /// field: an Iceberg SQL catalog's SQLite file.
    pub fn sink_catalog_file(&self) -> Option<(&'static str, &str)> {
        match &self.sink {
            SinkSpec::Iceberg(i) => i
                .sql()
                .sqlite_path()
                .ok()
                .map(|p| ("sink.iceberg.catalog.sql.uri", p)),
            SinkSpec::Files(_) | SinkSpec::Discard(_) | SinkSpec::Delta(_) | SinkSpec::Kafka(_) => {
                None
            }
        }
    }

    /// The security settings of a Kafka sink, with their field.
    pub fn sink_security(&self) -> Option<(&'static str, &KafkaSecurity)> {
        match &self.sink {
            SinkSpec::Kafka(k) => Some(("sink.kafka.security", &k.security)),
            SinkSpec::Files(_)
            | SinkSpec::Discard(_)
            | SinkSpec::Delta(_)
            | SinkSpec::Iceberg(_) => None,
        }
    }

    /// Field-by-field differences from `other`, as `field: old -> new`.
    pub fn diff(&self, other: &QuerySpec) -> Vec<String> {
        let mut a = Vec::new();
        let mut b = Vec::new();
        flatten("", &serde_json::to_value(self).unwrap_or_default(), &mut a);
        flatten("", &serde_json::to_value(other).unwrap_or_default(), &mut b);
        let keys: std::collections::BTreeSet<&String> =
            a.iter().chain(b.iter()).map(|(k, _)| k).collect();
        let get = |v: &Vec<(String, String)>, k: &str| {
            v.iter()
                .find(|(x, _)| x == k)
                .map(|(_, v)| v.clone())
                .unwrap_or("(unset)".into())
        };
        keys.into_iter()
            .filter_map(|k| {
                let (x, y) = (get(&a, k), get(&b, k));
                (x != y).then(|| format!("{k}: {x} -> {y}"))
            })
            .collect()
    }
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "name",
            format!("must match [a-z0-9-]{{1,63}}, got {name:?}"),
        ))
    }
}

impl From<&QuerySpec> for pb::QuerySpec {
    fn from(s: &QuerySpec) -> Self {
        pb::QuerySpec {
            name: s.name.clone(),
            source: s.source.as_ref().map(SourceSpec::to_proto),
            sources: s
                .sources
                .iter()
                .map(|(n, s)| (n.clone(), s.to_proto()))
                .collect(),
            watermarks: s
                .watermarks
                .iter()
                .map(|(n, w)| (n.clone(), w.to_proto()))
                .collect(),
            trigger: Some(pb::Trigger {
                interval_ms: s.trigger.interval_ms,
            }),
            max_rows_per_batch: s.max_rows_per_batch,
            sink: Some(s.sink.to_proto()),
            sql: s.sql.clone(),
            tables: s.tables.iter().map(|(n, t)| t.to_proto(n)).collect(),
            output_mode: s.output_mode.map(|m| m.as_str().to_string()),
            state_partitions: s.state_partitions,
            snapshot_interval: s.snapshot_interval,
            max_state_bytes: s.max_state_bytes,
            state_ttl_ms: s.state_ttl_ms,
            watermark: s.watermark.as_ref().map(WatermarkSpec::to_proto),
            dedup: s.dedup.as_ref().map(|d| pb::Dedup {
                columns: d.columns.clone(),
                within_ms: d.within_ms,
            }),
        }
    }
}

impl SourceSpec {
    pub fn to_proto(&self) -> pb::Source {
        let kind = match self {
            SourceSpec::Rate(r) => pb::source::Kind::Rate(pb::RateSource {
                partitions: r.partitions,
                rows_per_second: r.rows_per_second,
                total_rows: r.total_rows,
            }),
            SourceSpec::Files(f) => pb::source::Kind::Files(f.into()),
            SourceSpec::Kafka(k) => pb::source::Kind::Kafka(k.into()),
            SourceSpec::Nexmark(n) => pb::source::Kind::Nexmark(n.into()),
        };
        pb::Source { kind: Some(kind) }
    }

    pub fn from_proto(s: Option<&pb::Source>) -> Result<Self> {
        match s.and_then(|s| s.kind.as_ref()) {
            Some(pb::source::Kind::Rate(r)) => Ok(SourceSpec::Rate(RateSpec {
                partitions: r.partitions,
                rows_per_second: r.rows_per_second,
                total_rows: r.total_rows,
            })),
            Some(pb::source::Kind::Files(f)) => Ok(SourceSpec::Files(f.try_into()?)),
            Some(pb::source::Kind::Kafka(k)) => Ok(SourceSpec::Kafka(k.try_into()?)),
            Some(pb::source::Kind::Nexmark(n)) => Ok(SourceSpec::Nexmark(n.try_into()?)),
            None => Err(Error::invalid(
                "source",
                "missing; expected `rate`, `files`, `kafka` or `nexmark`",
            )),
        }
    }
}

impl FileSinkSpec {
    /// What each task of the query is told of the sink. A format this
    /// build does not know (a validated spec has none) is left
    /// unspecified, which executors refuse by name.
    pub fn to_task(&self) -> pb::TaskSink {
        let format = match self.format.as_str() {
            "jsonl" => pb::SinkFormat::Jsonl,
            "csv" => pb::SinkFormat::Csv,
            "parquet" => pb::SinkFormat::Parquet,
            _ => pb::SinkFormat::Unspecified,
        };
        pb::TaskSink {
            kind: Some(pb::task_sink::Kind::Files(pb::FilesTaskSink {
                path: self.path.clone(),
                format: format.into(),
                partition_by: self.partition_by.clone(),
                max_file_bytes: self.max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES),
            })),
        }
    }
}

impl SinkSpec {
    pub fn to_proto(&self) -> pb::Sink {
        match self {
            SinkSpec::Files(f) => pb::Sink {
                kind: Some(pb::sink::Kind::Files(pb::FileSink {
                    path: f.path.clone(),
                    format: f.format.clone(),
                    partition_by: f.partition_by.clone(),
                    max_file_bytes: f.max_file_bytes,
                })),
            },
            SinkSpec::Kafka(k) => pb::Sink {
                kind: Some(pb::sink::Kind::Kafka(k.into())),
            },
            SinkSpec::Discard(_) => pb::Sink {
                kind: Some(pb::sink::Kind::Discard(pb::DiscardSink {})),
            },
            SinkSpec::Delta(d) => pb::Sink {
                kind: Some(pb::sink::Kind::Delta(d.into())),
            },
            SinkSpec::Iceberg(i) => pb::Sink {
                kind: Some(pb::sink::Kind::Iceberg(i.into())),
            },
        }
    }

    /// What each task of query `query` (whose id is `query_id`) is told
    /// of the sink.
    pub fn to_task(&self, query: &str, query_id: &str) -> pb::TaskSink {
        match self {
            SinkSpec::Files(f) => f.to_task(),
            SinkSpec::Kafka(k) => pb::TaskSink {
                kind: Some(pb::task_sink::Kind::Kafka(k.to_task(query))),
            },
            SinkSpec::Discard(_) => pb::TaskSink {
                kind: Some(pb::task_sink::Kind::Discard(pb::DiscardTaskSink {})),
            },
            SinkSpec::Delta(d) => pb::TaskSink {
                kind: Some(pb::task_sink::Kind::Delta(d.to_task(query_id))),
            },
            // The table's place and columns are the driver's to add, once
            // it has read the table (see `Committer::task_sink`).
            SinkSpec::Iceberg(i) => pb::TaskSink {
                kind: Some(pb::task_sink::Kind::Iceberg(pb::IcebergTaskSink {
                    target_file_bytes: i.target_file_bytes(),
                    file_tag: query_id.replace('-', ""),
                    ..Default::default()
                })),
            },
        }
    }

    pub fn from_proto(s: Option<&pb::Sink>) -> Result<Self> {
        match s.and_then(|s| s.kind.as_ref()) {
            Some(pb::sink::Kind::Files(f)) => Ok(SinkSpec::Files(FileSinkSpec {
                path: f.path.clone(),
                format: if f.format.is_empty() {
                    default_format()
                } else {
                    f.format.clone()
                },
                partition_by: f.partition_by.clone(),
                max_file_bytes: f.max_file_bytes,
            })),
            Some(pb::sink::Kind::Kafka(k)) => Ok(SinkSpec::Kafka(k.try_into()?)),
            Some(pb::sink::Kind::Discard(_)) => Ok(SinkSpec::Discard(DiscardSinkSpec {})),
            Some(pb::sink::Kind::Delta(d)) => Ok(SinkSpec::Delta(d.try_into()?)),
            Some(pb::sink::Kind::Iceberg(i)) => Ok(SinkSpec::Iceberg(i.try_into()?)),
            None => Err(Error::invalid(
                "sink",
                "missing; expected `files`, `kafka`, `delta`, `iceberg` or `discard`",
            )),
        }
    }
}

impl TryFrom<&pb::QuerySpec> for QuerySpec {
    type Error = Error;

    fn try_from(p: &pb::QuerySpec) -> Result<Self> {
        let source = match (&p.source, p.sources.is_empty()) {
            (None, false) => None,
            (s, _) => Some(SourceSpec::from_proto(s.as_ref())?),
        };
        let mut sources = std::collections::BTreeMap::new();
        for (name, s) in &p.sources {
            sources.insert(name.clone(), SourceSpec::from_proto(Some(s))?);
        }
        let spec = QuerySpec {
            name: p.name.clone(),
            source,
            sources,
            watermarks: p
                .watermarks
                .iter()
                .map(|(n, w)| (n.clone(), WatermarkSpec::from_proto(w)))
                .collect(),
            trigger: TriggerSpec {
                interval_ms: p.trigger.as_ref().map(|t| t.interval_ms).unwrap_or(0),
            },
            max_rows_per_batch: p.max_rows_per_batch,
            sink: SinkSpec::from_proto(p.sink.as_ref())?,
            sql: p.sql.clone(),
            tables: p
                .tables
                .iter()
                .map(|t| Ok((t.name.clone(), TableSpec::try_from(t)?)))
                .collect::<Result<_>>()?,
            output_mode: match p.output_mode.as_deref() {
                None => None,
                Some(m) => Some(OutputMode::parse(m).ok_or_else(|| {
                    Error::invalid(
                        "output_mode",
                        format!("unknown mode {m:?}; expected append, update or complete"),
                    )
                })?),
            },
            state_partitions: p.state_partitions,
            snapshot_interval: p.snapshot_interval,
            max_state_bytes: p.max_state_bytes,
            state_ttl_ms: p.state_ttl_ms,
            watermark: p.watermark.as_ref().map(WatermarkSpec::from_proto),
            dedup: p.dedup.as_ref().map(|d| DedupSpec {
                columns: d.columns.clone(),
                within_ms: d.within_ms,
            }),
        };
        spec.validate()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: demo\nsource:\n  rate:\n    partitions: 4\n    rows_per_second: 100\n    total_rows: 1000\ntrigger:\n  interval_ms: 1000\nsink:\n  files:\n    path: /tmp/out\n    format: jsonl\n";

    fn field(text: &str) -> String {
        match QuerySpec::parse(text) {
            Err(Error::InvalidSpec { field, .. }) => field,
            other => panic!("expected invalid spec, got {other:?}"),
        }
    }

    #[test]
    fn parses_yaml_and_json_alike() {
        let y = QuerySpec::parse(GOOD).unwrap();
        let j = QuerySpec::parse(&serde_json::to_string(&y).unwrap()).unwrap();
        assert_eq!(y, j);
        assert_eq!(y.rate().unwrap().partitions, 4);
    }

    #[test]
    fn unknown_field_is_named() {
        let text = GOOD.replace("    partitions: 4", "    partitions: 4\n    colour: red");
        let err = QuerySpec::parse(&text).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
        assert_eq!(field(&text), "source.rate.colour");
    }

    #[test]
    fn out_of_range_values_are_named() {
        assert_eq!(
            field(&GOOD.replace("partitions: 4", "partitions: 0")),
            "source.rate.partitions"
        );
        assert_eq!(
            field(&GOOD.replace("partitions: 4", "partitions: 2000")),
            "source.rate.partitions"
        );
        assert_eq!(field(&GOOD.replace("name: demo", "name: Demo_1")), "name");
        assert_eq!(
            field(&GOOD.replace("format: jsonl", "format: avro")),
            "sink.files.format"
        );
        assert_eq!(
            field(&GOOD.replace("path: /tmp/out", "path: rel/out")),
            "sink.files.path"
        );
        assert_eq!(
            field(&GOOD.replace("partitions: 4", "partitions: many")),
            "source.rate.partitions"
        );
    }

    #[test]
    fn proto_round_trip() {
        let s = QuerySpec::parse(GOOD).unwrap();
        let p = pb::QuerySpec::from(&s);
        assert_eq!(QuerySpec::try_from(&p).unwrap(), s);
    }

    #[test]
    fn state_ttl_ms_is_checked_and_kept_and_absent_unless_set() {
        let text = format!("{GOOD}state_ttl_ms: 60000\n");
        let s = QuerySpec::parse(&text).unwrap();
        assert_eq!(s.state_ttl_ms, Some(60_000));
        let p = pb::QuerySpec::from(&s);
        assert_eq!(p.state_ttl_ms, Some(60_000));
        assert_eq!(QuerySpec::try_from(&p).unwrap(), s);
        assert_eq!(field(&format!("{GOOD}state_ttl_ms: 0\n")), "state_ttl_ms");
        let far = MAX_STATE_TTL_MS + 1;
        assert_eq!(
            field(&format!("{GOOD}state_ttl_ms: {far}\n")),
            "state_ttl_ms"
        );
        // A spec without it serializes as before.
        let plain = QuerySpec::parse(GOOD).unwrap();
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("state_ttl_ms"), "{json}");
    }

    #[test]
    fn diff_names_changed_fields() {
        let a = QuerySpec::parse(GOOD).unwrap();
        let b = QuerySpec::parse(&GOOD.replace("partitions: 4", "partitions: 8")).unwrap();
        assert_eq!(
            a.diff(&b),
            vec!["source.rate.partitions: 4 -> 8".to_string()]
        );
        assert!(a.diff(&a).is_empty());
    }
}
