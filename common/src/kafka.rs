//! Kafka: the one place that names the Kafka client (`rskafka`, pure Rust,
//! see `docs/kafka-client.md`). The driver asks it for topics and offsets,
//! the executor fetches records, and the tests and the benchmark produce.
//!
//! ```text
//!  Kafka::connect(servers) ─► topics() / partition(topic, p)
//!                                           │
//!                 earliest() · latest() · fetch(from, max_bytes) · produce(records)
//! ```
//!
//! Every call has a deadline ([`Kafka::deadline`]): the client's own
//! retries stop there, and so does the call. Errors name the servers and
//! what was asked, and say whether they can be retried (a broker that is
//! down: yes; a topic that does not exist: no).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;

use crate::error::{Error, Result, chain};

/// The deadline of one call when none is given.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// A connection to a Kafka cluster.
#[derive(Clone)]
pub struct Kafka {
    servers: String,
    client: Arc<Client>,
    deadline: Duration,
}

/// One record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp_ms: i64,
}

/// One record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub timestamp_ms: i64,
}

/// What one fetch returned: records from the offset asked for, in offset
/// order, and the partition's high watermark (its latest offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub records: Vec<KafkaRecord>,
    pub high_watermark: i64,
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

impl Kafka {
    /// Connects to `servers` and reads the cluster's metadata, within
    /// `deadline`.
    pub async fn connect(servers: &str, deadline: Duration) -> Result<Kafka> {
        let list = parse_servers(servers).map_err(|r| Error::Config(format!("kafka: {r}")))?;
        let backoff = rskafka::BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
            deadline: Some(deadline),
        };
        let build = ClientBuilder::new(list)
            .client_id("sluice")
            .backoff_config(backoff)
            .build();
        let client = within(servers, "connect", deadline, build).await?;
        Ok(Kafka {
            servers: servers.to_string(),
            client: Arc::new(client),
            deadline,
        })
    }

    /// The servers this connection was made to.
    pub fn servers(&self) -> &str {
        &self.servers
    }

    /// The deadline of each call.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Every topic with its partitions, in order.
    pub async fn topics(&self) -> Result<BTreeMap<String, Vec<i32>>> {
        let topics = self.call("list topics", self.client.list_topics()).await?;
        Ok(topics
            .into_iter()
            .map(|t| (t.name, t.partitions.into_iter().collect()))
            .collect())
    }

    /// A client of one partition. With `wait`, a partition the broker does
    /// not know (yet) is asked for again until the deadline, which is
    /// retryable; without, it is an error that is not.
    pub async fn partition(&self, topic: &str, partition: i32, wait: bool) -> Result<Partition> {
        let what = format!("open topic {topic:?} partition {partition}");
        let unknown = if wait {
            UnknownTopicHandling::Retry
        } else {
            UnknownTopicHandling::Error
        };
        let client = self
            .call(
                &what,
                self.client.partition_client(topic, partition, unknown),
            )
            .await?;
        Ok(Partition {
            kafka: self.clone(),
            client,
            topic: topic.to_string(),
            partition,
        })
    }

    /// Creates `topic` with `partitions` partitions (tests and benchmarks).
    pub async fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let controller = self
            .client
            .controller_client()
            .map_err(|e| self.err("create topic", e))?;
        let ms = self.deadline.as_millis().min(i32::MAX as u128) as i32;
        self.call(
            &format!("create topic {topic:?}"),
            controller.create_topic(topic, partitions, 1, ms),
        )
        .await
    }

    async fn call<T>(
        &self,
        what: &str,
        fut: impl Future<Output = rskafka::client::error::Result<T>>,
    ) -> Result<T> {
        within(&self.servers, what, self.deadline, fut).await
    }

    fn err(&self, what: &str, e: rskafka::client::error::Error) -> Error {
        kafka_error(&self.servers, what, &e)
    }
}

/// A client of one topic partition.
pub struct Partition {
    kafka: Kafka,
    client: PartitionClient,
    topic: String,
    partition: i32,
}

impl Partition {
    /// The offset of the earliest record still kept.
    pub async fn earliest(&self) -> Result<i64> {
        let what = self.what("read the earliest offset");
        self.kafka
            .call(&what, self.client.get_offset(OffsetAt::Earliest))
            .await
    }

    /// The offset the next record will get (the high watermark).
    pub async fn latest(&self) -> Result<i64> {
        let what = self.what("read the latest offset");
        self.kafka
            .call(&what, self.client.get_offset(OffsetAt::Latest))
            .await
    }

    /// Records from offset `from` on, about `max_bytes` of them, waiting
    /// up to `max_wait` for the first. Sorted by offset; none before `from`.
    pub async fn fetch(&self, from: i64, max_bytes: i32, max_wait: Duration) -> Result<Fetched> {
        let what = self.what(&format!("fetch from offset {from}"));
        let wait = max_wait.as_millis().min(i32::MAX as u128) as i32;
        let (records, high_watermark) = self
            .kafka
            .call(
                &what,
                self.client.fetch_records(from, 1..max_bytes.max(2), wait),
            )
            .await?;
        let mut records: Vec<KafkaRecord> = records
            .into_iter()
            .filter(|r| r.offset >= from)
            .map(|r| KafkaRecord {
                offset: r.offset,
                key: r.record.key,
                value: r.record.value,
                timestamp_ms: r.record.timestamp.timestamp_millis(),
            })
            .collect();
        // Some brokers answer a fetch from below their earliest offset
        // with records twice: keep each offset once.
        records.sort_by_key(|r| r.offset);
        records.dedup_by_key(|r| r.offset);
        Ok(Fetched {
            records,
            high_watermark,
        })
    }

    /// Appends `records`; returns the offsets they got.
    pub async fn produce(&self, records: Vec<NewRecord>) -> Result<Vec<i64>> {
        let what = self.what(&format!("produce {} records", records.len()));
        let records = records
            .into_iter()
            .map(|r| Record {
                key: r.key,
                value: Some(r.value),
                headers: BTreeMap::new(),
                timestamp: chrono::DateTime::from_timestamp_millis(r.timestamp_ms)
                    .unwrap_or_default(),
            })
            .collect();
        self.kafka
            .call(
                &what,
                self.client.produce(records, Compression::NoCompression),
            )
            .await
    }

    fn what(&self, op: &str) -> String {
        format!("topic {:?} partition {}: {op}", self.topic, self.partition)
    }
}

/// Runs `fut` within `deadline`, mapping its error.
async fn within<T>(
    servers: &str,
    what: &str,
    deadline: Duration,
    fut: impl Future<Output = rskafka::client::error::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(kafka_error(servers, what, &e)),
        Err(_) => Err(Error::Kafka {
            servers: servers.to_string(),
            what: what.to_string(),
            reason: format!("no answer within {} ms", deadline.as_millis()),
            retryable: true,
        }),
    }
}

/// Maps a client error: a topic or partition that does not exist cannot
/// be retried; a broker that cannot be reached, or answers with a
/// transient error, can.
fn kafka_error(servers: &str, what: &str, e: &rskafka::client::error::Error) -> Error {
    use rskafka::client::error::{Error as E, ProtocolError as P};
    let (reason, retryable) = match e {
        E::ServerError {
            protocol_error: p @ (P::UnknownTopicOrPartition | P::TopicAuthorizationFailed),
            ..
        } => (format!("{p}"), false),
        E::ServerError {
            protocol_error,
            error_message,
            ..
        } => (
            match error_message {
                Some(m) => format!("{protocol_error}: {m}"),
                None => format!("{protocol_error}"),
            },
            true,
        ),
        // Metadata that does not fit yet (a partition just added) is
        // fetched again on the next call.
        E::InvalidResponse(m) => (format!("invalid response: {m}"), true),
        other => (chain(other), true),
    };
    Error::Kafka {
        servers: servers.to_string(),
        what: what.to_string(),
        reason,
        retryable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn an_unreachable_broker_is_named_and_retryable() {
        // A port nothing listens on: bind, note it, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let servers = format!("127.0.0.1:{port}");
        let err = Kafka::connect(&servers, Duration::from_millis(300))
            .await
            .err()
            .expect("nothing listens there");
        assert!(err.is_retryable(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&servers) && text.contains("connect"),
            "{text}"
        );
    }
}
