//! `sluice-kafka`: the Kafka wire protocol client Sluice uses, to
//! produce, fetch, run and end transactions, over TLS and SASL. The one
//! crate that names a Kafka client (`krafka`, pure Rust, and
//! `kafka-protocol` for one request; see `docs/kafka-client.md`). The
//! driver asks it for topics and offsets and ends the sink's transactions,
//! the executor fetches records and writes the sink's, and the tests and
//! the benchmark produce. The settings it reads are the spec's
//! (`sluice_common::spec::KafkaSecurity`), their files and password as
//! `sluice_common::secrets` allows.
//!
//! ```text
//!  Kafka::connect_secure(servers, security, secrets, field) ─► topics() / partition(topic, p)
//!                 │                         │
//!                 │         earliest() · latest() · fetch(from, max_bytes) · produce(records)
//!                 └─► partition_count(topic) · writer(topic, delivery)      (writer.rs)
//!                                              send(..)* · finish() → TxnId
//!  end_transaction(servers, security, secrets, txn, commit)   EndTxn on a raw connection
//!                                                    (txn.rs, wire.rs, sasl.rs)
//! ```
//!
//! TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) come from the spec's
//! `security` settings (`security.rs`): krafka's client is built with them,
//! so its admin calls, consumers and producers all use them, and the raw
//! connection does the same handshakes itself. A refused login or
//! certificate is an error that is not retried and says what to fix; it
//! never holds the password.
//!
//! Reads are `read_committed`: a fetch never returns a record of an aborted
//! or open transaction, and [`Partition::latest`] is the partition's last
//! stable offset, the end of what such a reader may read.
//!
//! Every call has a deadline ([`Kafka::deadline`]). Errors name the servers
//! and what was asked, and say whether they can be retried (a broker that
//! is down: yes; a topic that does not exist: no).

mod error;
mod sasl;
#[cfg(test)]
mod sasl_tests;
mod security;
#[cfg(test)]
mod security_tests;
mod txn;
#[cfg(test)]
mod txn_tests;
mod wire;
#[cfg(test)]
mod wire_tests;
mod writer;

pub use error::{Error, Result};
pub use txn::{TxnEnd, TxnId, end_transaction};
pub use writer::{Delivery, Writer};

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use krafka::admin::{
    CreateTopicsOptions, DescribeTopicsOptions, ListOffsetsOptions, ListTopicsOptions, NewTopic,
    OffsetSpec, TopicPartition,
};
use krafka::consumer::{AutoOffsetReset, Consumer, IsolationLevel};
use krafka::error::ErrorCode;
use krafka::producer::Producer;
use krafka::{KrafkaError, Record};
use sluice_common::error::chain;
use sluice_common::secrets::Secrets;
use sluice_common::spec::{KafkaSecurity, parse_servers};
use tokio::sync::OnceCell;

use self::security::Secured;

/// The deadline of one call when none is given.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// How long a partition the broker does not know yet is asked for again.
const UNKNOWN_RETRY: Duration = Duration::from_millis(100);

/// A connection to a Kafka cluster.
#[derive(Clone)]
pub struct Kafka {
    target: Arc<Target>,
    client: krafka::Kafka,
    deadline: Duration,
    producer: Arc<OnceCell<Producer>>,
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
/// order, and the offset the next fetch starts at. `next` moves past
/// offsets that hold no record a reader sees (transaction markers, records
/// of aborted transactions) even when `records` is empty; it stays at the
/// offset asked for when the broker served nothing yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub records: Vec<KafkaRecord>,
    pub next: i64,
}

/// Where a connection goes and how it is secured: what its errors name.
struct Target {
    servers: String,
    secured: Secured,
}

impl Target {
    /// Maps a client error: a refused login or certificate cannot be
    /// retried and says what to fix; a topic or partition that does not
    /// exist, or that this client may not read, cannot be retried, nor can
    /// bad settings; a broker that cannot be reached, or answers with a
    /// transient error, can.
    fn error(&self, what: &str, e: &KrafkaError) -> Error {
        let (reason, retryable) = match self.secured.refusal(e) {
            Some(reason) => (reason, false),
            None => (self.secured.redact(&chain(e)), retryable(e)),
        };
        Error::Kafka {
            servers: self.servers.clone(),
            what: what.to_string(),
            reason,
            retryable,
        }
    }
}

impl Kafka {
    /// Connects to `servers` in plaintext and reads the cluster's metadata,
    /// within `deadline`.
    pub async fn connect(servers: &str, deadline: Duration) -> Result<Kafka> {
        let plaintext = KafkaSecurity::default();
        Kafka::connect_secure(servers, &plaintext, &Secrets::default(), "kafka", deadline).await
    }

    /// Connects to `servers` with TLS and SASL as `security` says, and
    /// reads the cluster's metadata, within `deadline`. `field` is where
    /// the settings are (`sink.kafka.security`): a file outside `secrets`'
    /// directory, a CA file that cannot be read or a password variable
    /// that is not set is an invalid-spec error naming it. Every client
    /// made from the connection (admin calls, consumers, producers) is
    /// secured alike; the password is read now, once.
    pub async fn connect_secure(
        servers: &str,
        security: &KafkaSecurity,
        secrets: &Secrets,
        field: &str,
        deadline: Duration,
    ) -> Result<Kafka> {
        let list = parse_servers(servers).map_err(|r| Error::Config(format!("kafka: {r}")))?;
        let secured = Secured::load_async(security, secrets, field).await?;
        let mut builder = krafka::Kafka::builder(list.join(","))
            .client_id("sluice")
            .request_timeout(deadline)
            .connect_timeout(deadline)
            .allow_auto_create_topics(false);
        if let Some(auth) = secured.krafka() {
            builder = builder.security(auth);
        }
        let target = Arc::new(Target {
            servers: servers.to_string(),
            secured,
        });
        let client = within(&target, "connect", deadline, builder.connect()).await?;
        Ok(Kafka {
            target,
            client,
            deadline,
            producer: Arc::new(OnceCell::new()),
        })
    }

    /// The servers this connection was made to.
    pub fn servers(&self) -> &str {
        &self.target.servers
    }

    /// The security settings this connection was made with.
    pub fn security(&self) -> &KafkaSecurity {
        self.target.secured.settings()
    }

    /// The deadline of each call.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Every topic with its partitions, in order.
    pub async fn topics(&self) -> Result<BTreeMap<String, Vec<i32>>> {
        let admin = self.client.admin();
        let names = self
            .call(
                "list topics",
                admin.list_topics(ListTopicsOptions::default()),
            )
            .await?;
        let described = self
            .call(
                "describe topics",
                admin.describe_topics(&names, DescribeTopicsOptions::default()),
            )
            .await?;
        let mut topics = BTreeMap::new();
        for (name, described) in described {
            // A topic deleted between the two calls is not listed.
            let Ok(topic) = described else { continue };
            let mut partitions: Vec<i32> = topic.partitions.iter().map(|p| p.partition).collect();
            partitions.sort_unstable();
            topics.insert(name, partitions);
        }
        Ok(topics)
    }

    /// A client of one partition. With `wait`, a partition the broker does
    /// not know (yet) is asked for again until the deadline, which is
    /// retryable; without, it is an error that is not.
    pub async fn partition(&self, topic: &str, partition: i32, wait: bool) -> Result<Partition> {
        let what = format!("open topic {topic:?} partition {partition}");
        let started = tokio::time::Instant::now();
        loop {
            let missing = match self.find(topic, partition, &what).await? {
                None => break,
                Some(missing) => missing,
            };
            if !wait || started.elapsed() + UNKNOWN_RETRY > self.deadline {
                return Err(Error::Kafka {
                    servers: self.target.servers.clone(),
                    what,
                    reason: missing,
                    retryable: wait,
                });
            }
            tokio::time::sleep(UNKNOWN_RETRY).await;
        }
        Ok(Partition {
            kafka: self.clone(),
            consumer: OnceCell::new(),
            topic: topic.to_string(),
            partition,
            read_committed: true,
        })
    }

    /// `None` when `topic` has `partition`; otherwise what is missing.
    async fn find(&self, topic: &str, partition: i32, what: &str) -> Result<Option<String>> {
        let admin = self.client.admin();
        let mut described = self
            .call(
                what,
                admin.describe_topics([topic], DescribeTopicsOptions::default()),
            )
            .await?;
        match described.remove(topic) {
            Some(Ok(t)) if t.partitions.iter().any(|p| p.partition == partition) => Ok(None),
            Some(Ok(t)) => Ok(Some(format!(
                "the topic has {} partitions, and no partition {partition}",
                t.partitions.len()
            ))),
            Some(Err(e)) if unknown_topic(&e) => Ok(Some("the topic does not exist".into())),
            Some(Err(e)) => Err(self.err(what, &e)),
            None => Ok(Some("the topic does not exist".into())),
        }
    }

    /// Creates `topic` with `partitions` partitions (tests and benchmarks).
    pub async fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let what = format!("create topic {topic:?}");
        let new = NewTopic::new(topic, partitions, 1).map_err(|e| self.err(&what, &e))?;
        let admin = self.client.admin();
        let mut created = self
            .call(
                &what,
                admin.create_topics([new], CreateTopicsOptions::default()),
            )
            .await?;
        match created.remove(topic) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(self.err(&what, &e)),
            None => Err(Error::Kafka {
                servers: self.target.servers.clone(),
                what,
                reason: "the broker did not answer for the topic".into(),
                retryable: true,
            }),
        }
    }

    /// Closes the producer, when one was made: what it holds is sent.
    pub async fn close(&self) -> Result<()> {
        match self.producer.get() {
            Some(producer) => self.call("close the producer", producer.close()).await,
            None => Ok(()),
        }
    }

    /// The producer of the tests and the benchmark, made on first use. Not
    /// idempotent: its sequence numbers would outlive a topic deleted and
    /// created again under the same name, which the broker refuses.
    async fn producer(&self) -> Result<&Producer> {
        let build = || self.client.producer().idempotent(false).build();
        self.producer
            .get_or_try_init(|| self.call("make a producer", build()))
            .await
    }

    async fn call<T>(&self, what: &str, fut: impl Future<Output = krafka::Result<T>>) -> Result<T> {
        within(&self.target, what, self.deadline, fut).await
    }

    fn err(&self, what: &str, e: &KrafkaError) -> Error {
        self.target.error(what, e)
    }
}

/// A client of one topic partition.
pub struct Partition {
    kafka: Kafka,
    /// Made on the first fetch, assigned this partition only.
    consumer: OnceCell<Consumer>,
    topic: String,
    partition: i32,
    /// `read_committed` (the default), or `read_uncommitted`.
    read_committed: bool,
}

impl Partition {
    /// The same partition read `read_uncommitted` when `committed` is
    /// false: every record, those of open and aborted transactions too, up
    /// to the high watermark. Set before the first fetch.
    pub fn committed_only(mut self, committed: bool) -> Partition {
        self.read_committed = committed;
        self
    }

    /// The offset of the earliest record still kept.
    pub async fn earliest(&self) -> Result<i64> {
        self.offset(OffsetSpec::Earliest, "read the earliest offset")
            .await
    }

    /// The partition's last stable offset: the end of what a
    /// `read_committed` reader may read (the high watermark, or the first
    /// offset of the oldest transaction still open); the high watermark
    /// for a `read_uncommitted` reader.
    pub async fn latest(&self) -> Result<i64> {
        self.offset(OffsetSpec::Latest, "read the latest offset")
            .await
    }

    async fn offset(&self, spec: OffsetSpec, op: &str) -> Result<i64> {
        let what = self.what(op);
        let tp = TopicPartition::new(self.topic.clone(), self.partition);
        let admin = self.kafka.client.admin();
        let options = ListOffsetsOptions::default().read_committed(self.read_committed);
        let mut listed = self
            .kafka
            .call(&what, admin.list_offsets([(tp.clone(), spec)], options))
            .await?;
        match listed.remove(&tp) {
            Some(Ok(o)) => Ok(o.offset),
            Some(Err(e)) => Err(self.kafka.err(&what, &e)),
            None => Err(Error::Kafka {
                servers: self.kafka.target.servers.clone(),
                what,
                reason: "the broker did not answer for the partition".into(),
                retryable: true,
            }),
        }
    }

    /// Records from offset `from` on, about `max_bytes` of them, waiting
    /// up to `max_wait` for the first. Sorted by offset; none before `from`.
    /// The first fetch sets the partition's fetch size and wait.
    pub async fn fetch(&self, from: i64, max_bytes: i32, max_wait: Duration) -> Result<Fetched> {
        let what = self.what(&format!("fetch from offset {from}"));
        let consumer = self
            .consumer
            .get_or_try_init(|| self.consumer(max_bytes, max_wait))
            .await?;
        let (topic, p) = (self.topic.as_str(), self.partition);
        if consumer.position(topic, p).await != Some(from) {
            self.kafka
                .call(&what, consumer.seek(topic, p, from))
                .await?;
        }
        let polled = self.kafka.call(&what, consumer.poll(max_wait)).await?;
        let mut records: Vec<KafkaRecord> = polled
            .into_iter()
            .filter(|r| r.offset >= from)
            .map(|r| KafkaRecord {
                offset: r.offset,
                key: r.key.map(|k| k.to_vec()),
                value: r.value.map(|v| v.to_vec()),
                timestamp_ms: r.timestamp,
            })
            .collect();
        // Some brokers answer a fetch from below their earliest offset
        // with records twice: keep each offset once.
        records.sort_by_key(|r| r.offset);
        records.dedup_by_key(|r| r.offset);
        let next = consumer.position(topic, p).await.unwrap_or(from);
        Ok(Fetched { records, next })
    }

    /// A consumer without a group (`read_committed` unless set otherwise), assigned this
    /// partition. A position the broker no longer has starts over at the
    /// earliest offset kept, which the reader sees as records gone.
    async fn consumer(&self, max_bytes: i32, max_wait: Duration) -> Result<Consumer> {
        let what = self.what("make a consumer");
        let build = self
            .kafka
            .client
            .consumer_without_group()
            .isolation_level(match self.read_committed {
                true => IsolationLevel::ReadCommitted,
                false => IsolationLevel::ReadUncommitted,
            })
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .max_partition_fetch_bytes(max_bytes.max(2))
            .fetch_max_bytes(max_bytes.max(2))
            .max_poll_records(-1)
            .fetch_max_wait(max_wait)
            .build();
        let consumer = self.kafka.call(&what, build).await?;
        self.kafka
            .call(&what, consumer.assign(&self.topic, vec![self.partition]))
            .await?;
        Ok(consumer)
    }

    /// Closes the partition's consumer, when a fetch made one.
    pub async fn close(&self) -> Result<()> {
        match self.consumer.get() {
            Some(consumer) => {
                let what = self.what("close the consumer");
                self.kafka.call(&what, consumer.close()).await
            }
            None => Ok(()),
        }
    }

    /// Appends `records`; returns the offsets they got.
    pub async fn produce(&self, records: Vec<NewRecord>) -> Result<Vec<i64>> {
        let what = self.what(&format!("produce {} records", records.len()));
        let producer = self.kafka.producer().await?;
        let sent = async {
            let mut handles = Vec::with_capacity(records.len());
            for r in records {
                let mut record = Record::new(self.topic.as_str(), r.value)
                    .partition(self.partition)
                    .timestamp(r.timestamp_ms);
                if let Some(key) = r.key {
                    record = record.key(key);
                }
                handles.push(producer.enqueue(record).await?);
            }
            producer.flush().await?;
            let mut offsets = Vec::with_capacity(handles.len());
            for handle in handles {
                offsets.push(handle.await?.offset);
            }
            Ok(offsets)
        };
        self.kafka.call(&what, sent).await
    }

    fn what(&self, op: &str) -> String {
        format!("topic {:?} partition {}: {op}", self.topic, self.partition)
    }
}

/// Runs `fut` within `deadline`, mapping its error.
async fn within<T>(
    target: &Target,
    what: &str,
    deadline: Duration,
    fut: impl Future<Output = krafka::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(target.error(what, &e)),
        Err(_) => Err(Error::Kafka {
            servers: target.servers.clone(),
            what: what.to_string(),
            reason: format!("no answer within {} ms", deadline.as_millis()),
            retryable: true,
        }),
    }
}

fn unknown_topic(e: &KrafkaError) -> bool {
    matches!(
        e,
        KrafkaError::Broker {
            code: ErrorCode::UnknownTopicOrPartition,
            ..
        }
    )
}

/// Whether a client error may pass: not a topic or partition that does
/// not exist or that this client may not read, nor bad credentials or
/// settings (see [`Target::error`]).
fn retryable(e: &KrafkaError) -> bool {
    !matches!(
        e,
        KrafkaError::Broker {
            code: ErrorCode::UnknownTopicOrPartition | ErrorCode::TopicAuthorizationFailed,
            ..
        } | KrafkaError::Auth { .. }
            | KrafkaError::Config { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
