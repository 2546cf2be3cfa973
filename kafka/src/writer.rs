//! The first phase of exactly-once into Kafka, and the at-least-once sink:
//! a [`Writer`] of one task into one topic.
//!
//! ```text
//!  kafka.writer(topic, ExactlyOnce { id, timeout })   kafka.writer(topic, AtLeastOnce)
//!    InitProducerId(id): fences older producers         an idempotent producer
//!    of the id, aborts their open transaction
//!    begin
//!        send(partition | key hash, key, value, ts) ... (queued, not awaited)
//!    finish: flush, every record acknowledged           finish: close → None
//!      → Some(TxnId), the transaction left OPEN
//!        for the driver's EndTxn (`txn`)
//!    abort: EndTxn(abort), close                        abort: close
//! ```
//!
//! A record's outcome reaches the writer through a producer interceptor,
//! so `send` never waits for an acknowledgement and keeps nothing per
//! record: the producer's `buffer_memory` bounds what is queued, and the
//! first failure is returned by the next `send` or by `finish`.
//!
//! A keyless record goes to the partition given; a keyed one without a
//! partition to krafka's default partitioner, Kafka's: murmur2 of the key,
//! masked positive, modulo the partition count.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use krafka::admin::DescribeTopicsOptions;
use krafka::interceptor::{InterceptorResult, ProducerInterceptor, RecordContext};
use krafka::producer::{Producer, RecordMetadata, TransactionalProducer};
use krafka::{CloseOptions, Headers, KrafkaError, Record};
use tracing::{debug, info, warn};

use super::txn::TxnId;
use super::{Kafka, Target, unknown_topic, within};
use crate::error::{Error, Result};

/// How a [`Writer`] delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// In a transaction under `transactional_id`, which the coordinator
    /// aborts if it is still open `timeout` after its first record.
    ExactlyOnce {
        transactional_id: String,
        timeout: Duration,
    },
    /// Each record acknowledged by every in-sync replica; a retried task
    /// writes its records again.
    AtLeastOnce,
}

/// A writer of one task into one topic; see the module header. Dropped
/// without [`Writer::finish`] or [`Writer::abort`] (a cancelled task), an
/// `ExactlyOnce` transaction stays open until its timeout or the id's next
/// writer aborts it.
pub struct Writer {
    topic: String,
    target: Arc<Target>,
    deadline: Duration,
    producer: Inner,
    outcomes: Arc<Outcomes>,
    records: u64,
    bytes: u64,
}

enum Inner {
    Exactly(Box<TransactionalProducer>),
    AtLeast(Box<Producer>),
}

impl Kafka {
    /// The number of partitions of `topic`; an error naming the topic, not
    /// retryable, when it does not exist.
    pub async fn partition_count(&self, topic: &str) -> Result<i32> {
        let what = format!("count the partitions of topic {topic:?}");
        let admin = self.client.admin();
        let mut described = self
            .call(
                &what,
                admin.describe_topics([topic], DescribeTopicsOptions::default()),
            )
            .await?;
        let missing = || Error::Kafka {
            servers: self.servers().to_string(),
            what: what.clone(),
            reason: "the topic does not exist".into(),
            retryable: false,
        };
        match described.remove(topic) {
            Some(Ok(t)) => i32::try_from(t.partitions.len()).map_err(|_| missing()),
            Some(Err(e)) if unknown_topic(&e) => Err(missing()),
            Some(Err(e)) => Err(self.err(&what, &e)),
            None => Err(missing()),
        }
    }

    /// A writer into `topic`. `ExactlyOnce` builds a transactional producer
    /// for the id (its `InitProducerId` fences older producers of the id
    /// and aborts their open transaction) and begins a transaction;
    /// `AtLeastOnce` an idempotent plain producer.
    pub async fn writer(&self, topic: &str, delivery: Delivery) -> Result<Writer> {
        let outcomes = Arc::new(Outcomes::default());
        // Long enough for krafka's own retries of a batch (it requires at
        // least linger plus the request timeout, which is `deadline`).
        let builder = self
            .client
            .producer()
            .max_block(self.deadline)
            .delivery_timeout(self.deadline * 2)
            .metrics_push(false)
            .interceptor(Arc::clone(&outcomes));
        let producer = match &delivery {
            Delivery::ExactlyOnce {
                transactional_id,
                timeout,
            } => {
                let what =
                    format!("start transactional id {transactional_id:?} for topic {topic:?}");
                let build = builder
                    .transaction_timeout(*timeout)
                    .build_transactional(transactional_id.as_str());
                let producer = self.call(&what, build).await?;
                if let Err(e) = producer.begin() {
                    let _ = producer.close_with(self.close_options()).await;
                    return Err(self.err(&what, &e));
                }
                info!(
                    topic, transactional_id = %transactional_id,
                    producer_id = producer.producer_id(),
                    producer_epoch = producer.producer_epoch(),
                    transaction_version = ?producer.transaction_version(),
                    "transaction begun"
                );
                Inner::Exactly(Box::new(producer))
            }
            Delivery::AtLeastOnce => {
                let what = format!("make a producer for topic {topic:?}");
                Inner::AtLeast(Box::new(
                    self.call(&what, builder.idempotent(true).build()).await?,
                ))
            }
        };
        Ok(Writer {
            topic: topic.to_string(),
            target: Arc::clone(&self.target),
            deadline: self.deadline,
            producer,
            outcomes,
            records: 0,
            bytes: 0,
        })
    }

    fn close_options(&self) -> CloseOptions {
        CloseOptions::new().timeout(self.deadline)
    }
}

impl Writer {
    /// Queues one record. `partition`: `Some(p)` for an explicit partition,
    /// `None` for the partition the key's murmur2 hash picks (Kafka's
    /// default partitioner). Returns once the record is queued, not
    /// acknowledged; waits only when the producer's buffer is full (at
    /// most the connection's deadline). A record that failed earlier fails
    /// this call.
    pub async fn send(
        &mut self,
        partition: Option<i32>,
        key: Option<Vec<u8>>,
        value: Vec<u8>,
        timestamp_ms: Option<i64>,
    ) -> Result<()> {
        if self.outcomes.failed.load(Ordering::Relaxed) {
            return Err(self.first_failure());
        }
        let bytes = (key.as_ref().map_or(0, Vec::len) + value.len()) as u64;
        let mut record = Record::new(self.topic.as_str(), value);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(ts) = timestamp_ms {
            record = record.timestamp(ts);
        }
        // The handle is dropped: the interceptor hears the outcome.
        let queued = match &self.producer {
            Inner::Exactly(p) => p.enqueue(record).await.map(drop),
            Inner::AtLeast(p) => p.enqueue(record).await.map(drop),
        };
        if let Err(e) = queued {
            return Err(self.error("queue a record", &e));
        }
        self.records += 1;
        self.bytes += bytes;
        Ok(())
    }

    /// Waits until every queued record is acknowledged; any failure is an
    /// error (and an `ExactlyOnce` transaction is then aborted, best
    /// effort). `ExactlyOnce`: returns the open transaction's [`TxnId`] and
    /// leaves it open for the driver's `EndTxn`; `None` when no record was
    /// sent, as the coordinator then holds no transaction to end.
    /// `AtLeastOnce`: closes the producer, returns `None`.
    pub async fn finish(self) -> Result<Option<TxnId>> {
        let flushed = match &self.producer {
            Inner::Exactly(p) => self.call("flush", p.flush()).await,
            Inner::AtLeast(p) => self.call("flush", p.flush()).await,
        };
        let acked = self.outcomes.acked.load(Ordering::Relaxed);
        let failed = match flushed {
            Err(e) => Some(e),
            Ok(()) if self.outcomes.failed.load(Ordering::Relaxed) => Some(self.first_failure()),
            // Every record has an outcome once the flush returns; checked
            // all the same, as exactly-once rests on it.
            Ok(()) if acked != self.records => Some(Error::Kafka {
                servers: self.target.servers.clone(),
                what: self.what("flush"),
                reason: format!("{acked} of {} records acknowledged", self.records),
                retryable: true,
            }),
            Ok(()) => None,
        };
        if let Some(e) = failed {
            if let Err(abort) = self.end(false).await {
                warn!(topic = %self.topic, error = %abort, "abandoning a failed writer");
            }
            return Err(e);
        }
        match (&self.producer, self.records) {
            (Inner::Exactly(p), 1..) => {
                let txn = TxnId {
                    transactional_id: p.transactional_id().to_string(),
                    producer_id: p.producer_id(),
                    producer_epoch: p.producer_epoch(),
                };
                info!(
                    topic = %self.topic, transactional_id = %txn.transactional_id,
                    producer_id = txn.producer_id, producer_epoch = txn.producer_epoch,
                    records = self.records, bytes = self.bytes, acked,
                    "transaction prepared; left open for the driver to end"
                );
                self.let_go();
                Ok(Some(txn))
            }
            (Inner::Exactly(_), _) => {
                // Nothing was queued, so the coordinator never heard of this
                // transaction (it learns of one at its first partition):
                // there is nothing to end, and an `EndTxn` for it could be
                // refused (`INVALID_TXN_STATE`).
                debug!(topic = %self.topic, "empty transaction; nothing to end");
                self.let_go();
                Ok(None)
            }
            (Inner::AtLeast(_), _) => {
                debug!(topic = %self.topic, records = self.records, acked, "writer finished");
                self.end(false).await?;
                Ok(None)
            }
        }
    }

    /// Abandons the writer (a failed task): `ExactlyOnce` aborts its
    /// transaction, best effort, within the connection's deadline.
    pub async fn abort(self) -> Result<()> {
        let failed = self.outcomes.failed.load(Ordering::Relaxed);
        if matches!(self.producer, Inner::Exactly(_)) && self.records == 0 && !failed {
            // As in `finish`: the coordinator holds no transaction.
            self.let_go();
            return Ok(());
        }
        self.end(true).await
    }

    /// Records queued so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Key and value bytes queued so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Aborts an open transaction (`ExactlyOnce`) and closes the producer,
    /// within the deadline in all.
    async fn end(&self, abandoned: bool) -> Result<()> {
        let started = tokio::time::Instant::now();
        let aborted = match &self.producer {
            Inner::Exactly(p) => {
                let aborted = self.call("abort the transaction", p.abort()).await;
                if abandoned {
                    info!(
                        topic = %self.topic, transactional_id = %p.transactional_id(),
                        ok = aborted.is_ok(), "transaction aborted"
                    );
                }
                aborted
            }
            Inner::AtLeast(_) => Ok(()),
        };
        // What is left of the deadline; after a failed abort, close tries
        // it once more.
        let left = self.deadline.saturating_sub(started.elapsed());
        let options = CloseOptions::new().timeout(left);
        let what = self.what("close");
        let left = left.max(Duration::from_millis(1));
        let closed = match &self.producer {
            Inner::Exactly(p) => within(&self.target, &what, left, p.close_with(options)).await,
            Inner::AtLeast(p) => within(&self.target, &what, left, p.close_with(options)).await,
        };
        aborted.and(closed)
    }

    /// Lets the producer of an open transaction go without aborting it:
    /// `close` would abort it, and krafka has no other way to close a
    /// producer (its KIP-939 `prepare` needs a broker with two-phase
    /// commit). Dropped, the producer has nothing left to send (every
    /// record was acknowledged), and the transaction stays open on the
    /// coordinator. krafka warns of every producer dropped without
    /// `close()`; here that is the intent, so this one drop runs under a
    /// dispatcher that records nothing (on this thread, for the drop only).
    fn let_go(self) {
        let silent = tracing::Dispatch::none();
        tracing::dispatcher::with_default(&silent, move || drop(self));
    }

    /// The first failed record's error.
    fn first_failure(&self) -> Error {
        let first = self.outcomes.first.lock().ok().and_then(|f| f.clone());
        let Some((partition, e)) = first else {
            return Error::Kafka {
                servers: self.target.servers.clone(),
                what: self.what("write a record"),
                reason: "a record failed".into(),
                retryable: true,
            };
        };
        let op = match partition {
            0.. => format!("write a record to partition {partition}"),
            _ => "write a record".to_string(),
        };
        self.target.error(&self.what(&op), &e)
    }

    async fn call<T>(&self, op: &str, fut: impl Future<Output = krafka::Result<T>>) -> Result<T> {
        within(&self.target, &self.what(op), self.deadline, fut).await
    }

    fn error(&self, op: &str, e: &KrafkaError) -> Error {
        self.target.error(&self.what(op), e)
    }

    fn what(&self, op: &str) -> String {
        match &self.producer {
            Inner::Exactly(p) => format!(
                "topic {:?}, transactional id {:?}: {op}",
                self.topic,
                p.transactional_id()
            ),
            Inner::AtLeast(_) => format!("topic {:?}: {op}", self.topic),
        }
    }
}

/// Every record's outcome, as the producer reports it: how many were
/// acknowledged, and the first failure with its partition (-1: unknown).
#[derive(Debug, Default)]
struct Outcomes {
    acked: AtomicU64,
    failed: AtomicBool,
    first: Mutex<Option<(i32, KrafkaError)>>,
}

impl ProducerInterceptor for Outcomes {
    fn on_acknowledgement(
        &self,
        topic: &str,
        partition: i32,
        result: std::result::Result<&RecordMetadata, &KrafkaError>,
        _headers: &Headers,
        _ctx: &mut RecordContext,
    ) -> InterceptorResult {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let Ok(mut first) = self.first.lock() else {
                    return Ok(());
                };
                if first.is_none() {
                    // Mapped by `first_failure`, with the writer's target.
                    *first = Some((partition, e.clone()));
                    self.failed.store(true, Ordering::Relaxed);
                    warn!(topic, partition, error = %e, "a record failed");
                }
            }
        }
        Ok(())
    }
}
