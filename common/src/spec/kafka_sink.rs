//! The Kafka sink's spec (`sink.kafka`): the servers, the topic, how a row
//! becomes a record, and the delivery guarantee.
//!
//! `exactly_once` (the default) writes each task's records in a Kafka
//! transaction that the driver commits with the batch (docs/design-notes.md,
//! "Exactly-once into Kafka"); it needs a broker with transactions.
//! `at_least_once` writes plain records, on any broker: a batch run again
//! after a failure writes its records again.

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use super::kafka_security::KafkaSecurity;
use crate::error::{Error, Result};

/// The longest transaction timeout a sink may ask for: Kafka brokers cap
/// it at `transaction.max.timeout.ms`, 15 minutes by default.
pub const MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;
/// The default transaction timeout: the longest a batch's transactions may
/// stay open, from a task's first record to the driver's commit, a
/// failover included.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;

/// How a row becomes a record's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkRecordFormat {
    /// The row as a JSON object (the file sink's `jsonl` encoding).
    #[default]
    Json,
    /// The `value` column's bytes (binary or text).
    Raw,
}

/// What a reader of the topic may rely on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Each row once, for `read_committed` readers: Kafka transactions.
    #[default]
    ExactlyOnce,
    /// Each row at least once: a batch run again writes again.
    AtLeastOnce,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::ExactlyOnce => "exactly_once",
            Delivery::AtLeastOnce => "at_least_once",
        }
    }
}

/// `sink.kafka`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkSpec {
    /// `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// The topic written; it must exist.
    pub topic: String,
    #[serde(default)]
    pub format: SinkRecordFormat,
    /// The output column whose value is the record's key (its text, or
    /// its bytes for a binary column). Keyed records go to the partition
    /// of the key's murmur2 hash, as Kafka's default partitioner does;
    /// records without a key go to one partition per task, round-robin by
    /// task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default)]
    pub delivery: Delivery,
    /// `exactly_once`: the prefix of the tasks' transactional ids
    /// (default `sluice-<query>`); two queries writing one cluster need
    /// different prefixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactional_id_prefix: Option<String>,
    /// `exactly_once`: how long a transaction may stay open before the
    /// broker aborts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_timeout_ms: Option<u64>,
    /// TLS and SASL settings of a secured cluster.
    #[serde(default, skip_serializing_if = "KafkaSecurity::is_plaintext")]
    pub security: KafkaSecurity,
}

impl KafkaSinkSpec {
    /// The prefix of the transactional ids of query `query`'s tasks.
    pub fn transactional_id_prefix(&self, query: &str) -> String {
        self.transactional_id_prefix
            .clone()
            .unwrap_or_else(|| format!("sluice-{query}"))
    }

    pub fn transaction_timeout_ms(&self) -> u64 {
        self.transaction_timeout_ms
            .unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS)
    }

    pub fn validate(&self) -> Result<()> {
        let field = "sink.kafka";
        super::kafka::parse_servers(&self.bootstrap_servers)
            .map_err(|r| Error::invalid(format!("{field}.bootstrap_servers"), r))?;
        super::kafka::validate_topic(&self.topic)
            .map_err(|r| Error::invalid(format!("{field}.topic"), r))?;
        if self.topic.starts_with("__") {
            return Err(Error::invalid(
                format!("{field}.topic"),
                format!(
                    "{:?} starts with `__`, which marks Kafka's internal topics \
                     (__consumer_offsets, __transaction_state); write to another topic",
                    self.topic
                ),
            ));
        }
        self.security.validate(&format!("{field}.security"))?;
        if self.key.as_deref().is_some_and(str::is_empty) {
            return Err(Error::invalid(
                format!("{field}.key"),
                "must name an output column",
            ));
        }
        if let Some(p) = &self.transactional_id_prefix {
            let ok = !p.is_empty() && p.len() <= 200 && !p.chars().any(char::is_control);
            if !ok {
                return Err(Error::invalid(
                    format!("{field}.transactional_id_prefix"),
                    "must be 1 to 200 printable characters",
                ));
            }
        }
        if self.delivery == Delivery::AtLeastOnce
            && (self.transactional_id_prefix.is_some() || self.transaction_timeout_ms.is_some())
        {
            return Err(Error::invalid(
                format!("{field}.delivery"),
                "at_least_once writes without transactions: leave out \
                 transactional_id_prefix and transaction_timeout_ms",
            ));
        }
        if let Some(t) = self.transaction_timeout_ms
            && !(1000..=MAX_TRANSACTION_TIMEOUT_MS).contains(&t)
        {
            return Err(Error::invalid(
                format!("{field}.transaction_timeout_ms"),
                format!("must be in 1000..={MAX_TRANSACTION_TIMEOUT_MS}, got {t}"),
            ));
        }
        Ok(())
    }

    /// What each task of query `query` is told of the sink.
    pub fn to_task(&self, query: &str) -> pb::KafkaTaskSink {
        pb::KafkaTaskSink {
            bootstrap_servers: self.bootstrap_servers.clone(),
            topic: self.topic.clone(),
            raw: self.format == SinkRecordFormat::Raw,
            key: self.key.clone(),
            transactional_id_prefix: match self.delivery {
                Delivery::ExactlyOnce => self.transactional_id_prefix(query),
                Delivery::AtLeastOnce => String::new(),
            },
            transaction_timeout_ms: self.transaction_timeout_ms(),
            security: (!self.security.is_plaintext()).then(|| (&self.security).into()),
        }
    }
}

impl From<&KafkaSinkSpec> for pb::KafkaSink {
    fn from(k: &KafkaSinkSpec) -> Self {
        pb::KafkaSink {
            bootstrap_servers: k.bootstrap_servers.clone(),
            topic: k.topic.clone(),
            format: match k.format {
                SinkRecordFormat::Json => "json",
                SinkRecordFormat::Raw => "raw",
            }
            .to_string(),
            key: k.key.clone(),
            delivery: k.delivery.as_str().to_string(),
            transactional_id_prefix: k.transactional_id_prefix.clone(),
            transaction_timeout_ms: k.transaction_timeout_ms,
            security: (!k.security.is_plaintext()).then(|| (&k.security).into()),
        }
    }
}

impl TryFrom<&pb::KafkaSink> for KafkaSinkSpec {
    type Error = Error;

    fn try_from(k: &pb::KafkaSink) -> Result<Self> {
        let field = "sink.kafka";
        Ok(KafkaSinkSpec {
            bootstrap_servers: k.bootstrap_servers.clone(),
            topic: k.topic.clone(),
            format: match k.format.as_str() {
                "" | "json" => SinkRecordFormat::Json,
                "raw" => SinkRecordFormat::Raw,
                f => {
                    return Err(Error::invalid(
                        format!("{field}.format"),
                        format!("unknown format {f:?}; expected json or raw"),
                    ));
                }
            },
            key: k.key.clone(),
            delivery: match k.delivery.as_str() {
                "" | "exactly_once" => Delivery::ExactlyOnce,
                "at_least_once" => Delivery::AtLeastOnce,
                d => {
                    return Err(Error::invalid(
                        format!("{field}.delivery"),
                        format!("unknown delivery {d:?}; expected exactly_once or at_least_once"),
                    ));
                }
            },
            transactional_id_prefix: k.transactional_id_prefix.clone(),
            transaction_timeout_ms: k.transaction_timeout_ms,
            security: KafkaSecurity::from_proto(k.security.as_ref(), &format!("{field}.security"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> KafkaSinkSpec {
        serde_yaml_ng::from_str(yaml).expect("parses")
    }

    #[test]
    fn defaults_are_json_and_exactly_once() {
        let s = spec("{bootstrap_servers: 'a:1', topic: out}");
        assert_eq!(s.format, SinkRecordFormat::Json);
        assert_eq!(s.delivery, Delivery::ExactlyOnce);
        assert_eq!(s.transactional_id_prefix("q"), "sluice-q");
        assert_eq!(s.to_task("q").transactional_id_prefix, "sluice-q");
        s.validate().unwrap();
        let back = KafkaSinkSpec::try_from(&pb::KafkaSink::from(&s)).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn bad_fields_are_named() {
        let bad = |yaml: &str, field: &str| {
            let e = spec(yaml).validate().unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        };
        bad(
            "{bootstrap_servers: 'a', topic: out}",
            "sink.kafka.bootstrap_servers",
        );
        bad(
            "{bootstrap_servers: 'a:1', topic: 'a b'}",
            "sink.kafka.topic",
        );
        for internal in ["__consumer_offsets", "__transaction_state", "__mine"] {
            let yaml = format!("{{bootstrap_servers: 'a:1', topic: {internal}}}");
            let e = spec(&yaml).validate().unwrap_err().to_string();
            assert!(
                e.contains("sink.kafka.topic") && e.contains("Kafka's internal topics"),
                "{e}"
            );
        }
        for illegal in ["''", "'.'", "'..'", "'a/b'", "'é'"] {
            let yaml = format!("{{bootstrap_servers: 'a:1', topic: {illegal}}}");
            bad(&yaml, "sink.kafka.topic");
        }
        let long = format!("{{bootstrap_servers: 'a:1', topic: {}}}", "t".repeat(250));
        bad(&long, "sink.kafka.topic");
        let longest = format!("{{bootstrap_servers: 'a:1', topic: {}}}", "t".repeat(249));
        spec(&longest).validate().unwrap();
        spec("{bootstrap_servers: 'a:1', topic: _a.b-c_}")
            .validate()
            .unwrap();
        bad(
            "{bootstrap_servers: 'a:1', topic: t, key: ''}",
            "sink.kafka.key",
        );
        bad(
            "{bootstrap_servers: 'a:1', topic: t, transaction_timeout_ms: 10}",
            "sink.kafka.transaction_timeout_ms",
        );
        bad(
            "{bootstrap_servers: 'a:1', topic: t, delivery: at_least_once, transaction_timeout_ms: 5000}",
            "sink.kafka.delivery",
        );
        let e = serde_yaml_ng::from_str::<KafkaSinkSpec>(
            "{bootstrap_servers: 'a:1', topic: t, delivery: twice}",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("exactly_once"), "{e}");
    }
}
