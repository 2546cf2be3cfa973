//! The Kafka source's spec (`source.kafka`): the servers, the topics, where
//! a new query starts, the per-batch cap, and how records become rows.
//!
//! `starting_offsets` is `earliest`, `latest`, `{partition: offset}` (one
//! topic) or `{topic: {partition: offset}}`, as in Spark, where `-2` means
//! earliest and `-1` latest. It is read once, when the query is created;
//! after that the checkpoint says where the query is.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use sluice_proto as pb;

use super::files::{
    ColumnSpec, OnBadRecord, columns_from_proto, columns_to_proto, declared_schema,
};
use super::kafka_security::KafkaSecurity;
use crate::error::{Error, Result};

/// The columns every Kafka record adds after its own.
pub const KAFKA_COLUMNS: [&str; 3] = ["kafka_partition", "kafka_offset", "kafka_timestamp"];

/// The schema of a Kafka source's `input` table: the declared columns
/// (json) or `key` and `value` (raw), then [`KAFKA_COLUMNS`].
pub fn kafka_schema(format: KafkaFormat, columns: Option<&[ColumnSpec]>) -> Result<SchemaRef> {
    let mut fields: Vec<Field> = match (format, columns) {
        (KafkaFormat::Json, Some(c)) => declared_schema(c)
            .map_err(|(i, r)| Error::invalid(format!("source.kafka.schema[{i}]"), r))?
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect(),
        (KafkaFormat::Json, None) => {
            return Err(Error::invalid(
                "source.kafka.schema",
                "required for format json",
            ));
        }
        (KafkaFormat::Raw, _) => vec![
            Field::new("key", DataType::Binary, true),
            Field::new("value", DataType::Binary, true),
        ],
    };
    fields.push(Field::new(KAFKA_COLUMNS[0], DataType::Int32, false));
    fields.push(Field::new(KAFKA_COLUMNS[1], DataType::Int64, false));
    fields.push(Field::new(
        KAFKA_COLUMNS[2],
        DataType::Timestamp(TimeUnit::Millisecond, None),
        false,
    ));
    Ok(Arc::new(Schema::new(fields)))
}

/// The largest `max_records_per_partition`.
pub const MAX_RECORDS_PER_PARTITION: u64 = 1 << 40;

/// A specific starting offset that means "the earliest kept record".
pub const EARLIEST: i64 = -2;
/// A specific starting offset that means "the next record produced".
pub const LATEST: i64 = -1;

/// How a record's bytes become a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaFormat {
    /// The value is a JSON object of the declared schema.
    Json,
    /// `key` and `value` as binary columns.
    Raw,
}

impl KafkaFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaFormat::Json => "json",
            KafkaFormat::Raw => "raw",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "json" => Some(KafkaFormat::Json),
            "raw" => Some(KafkaFormat::Raw),
            _ => None,
        }
    }
}

/// Which records of transactions the source reads (Kafka's
/// `isolation.level`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Committed records only, up to the last stable offset.
    #[default]
    ReadCommitted,
    /// Every record, those of open and aborted transactions too.
    ReadUncommitted,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }

    fn is_default(&self) -> bool {
        *self == Isolation::ReadCommitted
    }
}

/// Where a new query starts reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StartingOffsets {
    #[default]
    Earliest,
    Latest,
    /// Per partition of the only topic.
    Partitions(BTreeMap<i32, i64>),
    /// Per topic, per partition.
    Topics(BTreeMap<String, BTreeMap<i32, i64>>),
}

impl StartingOffsets {
    /// The form of the proto field and Spark's option: a name or JSON.
    pub fn to_text(&self) -> String {
        match self {
            StartingOffsets::Earliest => "earliest".into(),
            StartingOffsets::Latest => "latest".into(),
            other => serde_json::to_string(other).expect("offsets encode"),
        }
    }

    /// Parses [`Self::to_text`]'s form; empty means earliest.
    pub fn from_text(text: &str) -> std::result::Result<Self, String> {
        match text.trim() {
            "" | "earliest" => Ok(StartingOffsets::Earliest),
            "latest" => Ok(StartingOffsets::Latest),
            json => serde_json::from_str(json).map_err(|e| e.to_string()),
        }
    }

    /// The offset named for `topic` partition `partition`, if any
    /// ([`EARLIEST`] and [`LATEST`] stand for the two ends).
    pub fn named(&self, topic: &str, partition: i32) -> Option<i64> {
        match self {
            StartingOffsets::Earliest => Some(EARLIEST),
            StartingOffsets::Latest => Some(LATEST),
            StartingOffsets::Partitions(m) => m.get(&partition).copied(),
            StartingOffsets::Topics(t) => t.get(topic).and_then(|m| m.get(&partition)).copied(),
        }
    }
}

impl Serialize for StartingOffsets {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let keyed = |m: &BTreeMap<i32, i64>| -> BTreeMap<String, i64> {
            m.iter().map(|(p, o)| (p.to_string(), *o)).collect()
        };
        match self {
            StartingOffsets::Earliest => s.serialize_str("earliest"),
            StartingOffsets::Latest => s.serialize_str("latest"),
            StartingOffsets::Partitions(m) => keyed(m).serialize(s),
            StartingOffsets::Topics(t) => t
                .iter()
                .map(|(k, m)| (k.clone(), keyed(m)))
                .collect::<BTreeMap<_, _>>()
                .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for StartingOffsets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(OffsetsVisitor)
    }
}

const EXPECTED: &str = "earliest, latest, {partition: offset} or {topic: {partition: offset}} (-2: earliest, -1: latest)";

struct OffsetsVisitor;

impl<'de> Visitor<'de> for OffsetsVisitor {
    type Value = StartingOffsets;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        match v {
            "earliest" => Ok(StartingOffsets::Earliest),
            "latest" => Ok(StartingOffsets::Latest),
            _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
        }
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut partitions = BTreeMap::new();
        let mut topics = BTreeMap::new();
        while let Some(key) = map.next_key::<Key>()? {
            match map.next_value::<Entry>()? {
                Entry::Offset(o) => {
                    let p = key.partition().map_err(de::Error::custom)?;
                    partitions.insert(p, o);
                }
                Entry::Partitions(m) => {
                    let m = m
                        .into_iter()
                        .map(|(k, o)| Ok((k.partition()?, o)))
                        .collect::<std::result::Result<_, String>>()
                        .map_err(de::Error::custom)?;
                    topics.insert(key.0, m);
                }
            }
        }
        match (partitions.is_empty(), topics.is_empty()) {
            (false, false) => Err(de::Error::custom(
                "mixes {partition: offset} with {topic: {partition: offset}}",
            )),
            (true, false) => Ok(StartingOffsets::Topics(topics)),
            _ => Ok(StartingOffsets::Partitions(partitions)),
        }
    }
}

/// A map key: a topic name or a partition number, as text or a number.
struct Key(String);

impl Key {
    fn partition(&self) -> std::result::Result<i32, String> {
        self.0
            .parse::<i32>()
            .ok()
            .filter(|p| *p >= 0)
            .ok_or_else(|| format!("{:?} is not a partition number", self.0))
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a topic name or a partition number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Key, E> {
                Ok(Key(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A map value: an offset, or a topic's partitions.
enum Entry {
    Offset(i64),
    Partitions(BTreeMap<PartitionKey, i64>),
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct PartitionKey(String);

impl PartitionKey {
    fn partition(&self) -> std::result::Result<i32, String> {
        Key(self.0.clone()).partition()
    }
}

impl<'de> Deserialize<'de> for PartitionKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Key::deserialize(d).map(|k| PartitionKey(k.0))
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entry;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an offset or {partition: offset}")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Entry, E> {
                Ok(Entry::Offset(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Entry, E> {
                i64::try_from(v)
                    .map(Entry::Offset)
                    .map_err(|_| E::custom(format!("offset {v} is too large")))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Entry, A::Error> {
                let mut m = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<PartitionKey, i64>()? {
                    m.insert(k, v);
                }
                Ok(Entry::Partitions(m))
            }
        }
        d.deserialize_any(V)
    }
}

fn yes() -> bool {
    true
}

/// `source.kafka`: records of one or more topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSpec {
    /// `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<String>,
    #[serde(default)]
    pub starting_offsets: StartingOffsets,
    /// The most records one batch reads from one partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_records_per_partition: Option<u64>,
    /// `json` with `schema`, or `raw`; absent: json when a schema is
    /// declared, raw otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<KafkaFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Vec<ColumnSpec>>,
    #[serde(default = "yes")]
    pub fail_on_data_loss: bool,
    #[serde(default)]
    pub on_bad_record: OnBadRecord,
    /// TLS and SASL settings of a secured cluster.
    #[serde(default, skip_serializing_if = "KafkaSecurity::is_plaintext")]
    pub security: KafkaSecurity,
    #[serde(default, skip_serializing_if = "Isolation::is_default")]
    pub isolation: Isolation,
}

impl KafkaSourceSpec {
    /// The topics read, in the order given.
    pub fn topics(&self) -> Vec<String> {
        match &self.topic {
            Some(t) => vec![t.clone()],
            None => self.topics.clone(),
        }
    }

    /// The format in effect.
    pub fn format(&self) -> KafkaFormat {
        self.format.unwrap_or(if self.schema.is_some() {
            KafkaFormat::Json
        } else {
            KafkaFormat::Raw
        })
    }

    /// The schema of the query's `input` table.
    pub fn schema(&self) -> Result<SchemaRef> {
        kafka_schema(self.format(), self.schema.as_deref())
    }

    pub fn validate(&self, field: &str) -> Result<()> {
        parse_servers(&self.bootstrap_servers)
            .map_err(|r| Error::invalid(format!("{field}.bootstrap_servers"), r))?;
        self.security.validate(&format!("{field}.security"))?;
        match (&self.topic, self.topics.is_empty()) {
            (Some(_), false) => {
                return Err(Error::invalid(
                    format!("{field}.topics"),
                    "give either `topic` or `topics`, not both",
                ));
            }
            (None, true) => {
                return Err(Error::invalid(
                    format!("{field}.topic"),
                    "required: the topic to read (or `topics: [a, b]`)",
                ));
            }
            _ => {}
        }
        let topics = self.topics();
        for (i, t) in topics.iter().enumerate() {
            let name = match self.topic {
                Some(_) => format!("{field}.topic"),
                None => format!("{field}.topics[{i}]"),
            };
            validate_topic(t).map_err(|r| Error::invalid(&name, r))?;
            if topics[..i].contains(t) {
                return Err(Error::invalid(name, format!("topic {t:?} is named twice")));
            }
        }
        let offsets = format!("{field}.starting_offsets");
        match &self.starting_offsets {
            StartingOffsets::Partitions(m) => {
                if topics.len() > 1 {
                    return Err(Error::invalid(
                        offsets,
                        "with several topics, name the topic: {topic: {partition: offset}}",
                    ));
                }
                check_offsets(&offsets, m)?;
            }
            StartingOffsets::Topics(t) => {
                for (name, m) in t {
                    if !topics.contains(name) {
                        return Err(Error::invalid(
                            offsets,
                            format!("names topic {name:?}, which the source does not read"),
                        ));
                    }
                    check_offsets(&format!("{offsets}.{name}"), m)?;
                }
            }
            _ => {}
        }
        if let Some(n) = self.max_records_per_partition
            && (n == 0 || n > MAX_RECORDS_PER_PARTITION)
        {
            return Err(Error::invalid(
                format!("{field}.max_records_per_partition"),
                format!("must be in 1..={MAX_RECORDS_PER_PARTITION}, got {n}"),
            ));
        }
        match (self.format(), &self.schema) {
            (KafkaFormat::Json, None) => Err(Error::invalid(
                format!("{field}.schema"),
                "required for format json: declare the columns of the records' values",
            )),
            (KafkaFormat::Raw, Some(_)) => Err(Error::invalid(
                format!("{field}.schema"),
                "format raw has the fixed columns key and value; use format json to declare columns",
            )),
            (KafkaFormat::Json, Some(columns)) => {
                declared_schema(columns).map_err(|(i, reason)| {
                    Error::invalid(format!("{field}.schema[{i}]"), reason)
                })?;
                if let Some(c) = columns.iter().find(|c| c.name.starts_with("kafka_")) {
                    return Err(Error::invalid(
                        format!("{field}.schema"),
                        format!(
                            "column {:?}: names starting with kafka_ are the source's own columns",
                            c.name
                        ),
                    ));
                }
                Ok(())
            }
            (KafkaFormat::Raw, None) => Ok(()),
        }
    }
}

fn check_offsets(field: &str, m: &BTreeMap<i32, i64>) -> Result<()> {
    if m.is_empty() {
        return Err(Error::invalid(
            field,
            format!("names no partition; expected {EXPECTED}"),
        ));
    }
    match m.iter().find(|(_, o)| **o < EARLIEST) {
        Some((p, o)) => Err(Error::invalid(
            format!("{field}.{p}"),
            format!("offset {o} is below -2 (-2: earliest, -1: latest)"),
        )),
        None => Ok(()),
    }
}

/// The servers of a `bootstrap_servers` list (comma-separated `host:port`).
pub fn parse_servers(servers: &str) -> std::result::Result<Vec<String>, String> {
    let list: Vec<String> = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if list.is_empty() {
        return Err("names no server; expected host:port[,host:port...]".into());
    }
    for s in &list {
        let port = s.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
        if !matches!(port, Some((h, Ok(p))) if !h.is_empty() && p > 0) {
            return Err(format!("{s:?} is not host:port"));
        }
    }
    Ok(list)
}

/// Kafka's rule for topic names.
pub(super) fn validate_topic(t: &str) -> std::result::Result<(), String> {
    let ok = !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{t:?} is not a Kafka topic name ([a-zA-Z0-9._-], 1 to 249 characters)"
        ))
    }
}

impl From<&KafkaSourceSpec> for pb::KafkaSource {
    fn from(k: &KafkaSourceSpec) -> Self {
        pb::KafkaSource {
            bootstrap_servers: k.bootstrap_servers.clone(),
            topic: k.topic.clone(),
            topics: k.topics.clone(),
            starting_offsets: k.starting_offsets.to_text(),
            max_records_per_partition: k.max_records_per_partition,
            format: k.format.map(|f| f.as_str().to_string()),
            schema: columns_to_proto(&k.schema),
            fail_on_data_loss: Some(k.fail_on_data_loss),
            on_bad_record: k.on_bad_record.as_str().to_string(),
            security: (!k.security.is_plaintext()).then(|| (&k.security).into()),
            isolation: (!k.isolation.is_default()).then(|| k.isolation.as_str().to_string()),
        }
    }
}

impl TryFrom<&pb::KafkaSource> for KafkaSourceSpec {
    type Error = Error;

    fn try_from(k: &pb::KafkaSource) -> Result<Self> {
        let field = "source.kafka";
        Ok(KafkaSourceSpec {
            bootstrap_servers: k.bootstrap_servers.clone(),
            topic: k.topic.clone(),
            topics: k.topics.clone(),
            starting_offsets: StartingOffsets::from_text(&k.starting_offsets)
                .map_err(|r| Error::invalid(format!("{field}.starting_offsets"), r))?,
            max_records_per_partition: k.max_records_per_partition,
            format: match k.format.as_deref() {
                None => None,
                Some(f) => Some(KafkaFormat::parse(f).ok_or_else(|| {
                    Error::invalid(
                        format!("{field}.format"),
                        format!("unknown format {f:?}; expected json or raw"),
                    )
                })?),
            },
            schema: columns_from_proto(&k.schema),
            fail_on_data_loss: k.fail_on_data_loss.unwrap_or(true),
            on_bad_record: OnBadRecord::parse(&format!("{field}.on_bad_record"), &k.on_bad_record)?,
            security: KafkaSecurity::from_proto(k.security.as_ref(), &format!("{field}.security"))?,
            isolation: match k.isolation.as_deref() {
                None | Some("read_committed") => Isolation::ReadCommitted,
                Some("read_uncommitted") => Isolation::ReadUncommitted,
                Some(i) => {
                    return Err(Error::invalid(
                        format!("{field}.isolation"),
                        format!(
                            "unknown isolation {i:?}; expected read_committed or read_uncommitted"
                        ),
                    ));
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> std::result::Result<StartingOffsets, String> {
        serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn starting_offsets_forms() {
        assert_eq!(parse("earliest").unwrap(), StartingOffsets::Earliest);
        assert_eq!(parse("latest").unwrap(), StartingOffsets::Latest);
        let one = StartingOffsets::Partitions([(0, 42), (1, -2)].into());
        assert_eq!(parse(r#"{"0": 42, "1": -2}"#).unwrap(), one);
        assert_eq!(parse("{0: 42, 1: -2}").unwrap(), one);
        let many = parse(r#"{a: {"0": 5}, b: {1: -1}}"#).unwrap();
        assert_eq!(many.named("a", 0), Some(5));
        assert_eq!(many.named("b", 1), Some(LATEST));
        assert_eq!(many.named("b", 0), None);
        for s in [
            StartingOffsets::Earliest,
            StartingOffsets::Latest,
            one,
            many,
        ] {
            assert_eq!(StartingOffsets::from_text(&s.to_text()).unwrap(), s);
        }
        assert!(parse("newest").unwrap_err().contains("earliest, latest"));
        assert!(
            parse(r#"{"x": 1}"#)
                .unwrap_err()
                .contains("not a partition")
        );
        assert!(
            parse(r#"{"0": 1, "t": {"0": 1}}"#)
                .unwrap_err()
                .contains("mixes")
        );
    }

    #[test]
    fn topic_names_follow_kafka() {
        assert!(validate_topic("events.v1_x-y").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("a b").is_err());
        assert!(validate_topic("..").is_err());
    }

    #[test]
    fn servers_are_checked_one_by_one() {
        assert_eq!(
            parse_servers("a:1, b:2,").unwrap(),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        assert!(parse_servers(" , ").unwrap_err().contains("no server"));
        assert!(parse_servers("a:1,b").unwrap_err().contains("\"b\""));
        assert!(parse_servers(":9092").is_err());
        assert!(parse_servers("a:0").is_err());
    }
}
