//! The Kafka sink on the executor: a task's output rows as records
//! ([`Records`], on the blocking side), and the records into the topic
//! ([`deliver`], on the task), in bounded memory like the file sink's
//! pieces (see `crate::output`).
//!
//! ```text
//!  output batch ─► Records::encode: (key, value) per row ─► Piece::Records
//!  deliver: writer(topic, delivery) ─► send each ─► finish: flushed
//!           exactly_once: the transaction is left open, reported to the driver
//! ```
//!
//! A row's value is the row as a JSON object (the file sink's `jsonl`
//! encoding), or the `value` column's bytes (`raw`). Its key is the `key`
//! column's text (or bytes); a keyed record goes to the partition of the
//! key's murmur2 hash, a record without a key to the task's own partition,
//! round-robin by task over the topic's partitions.
//!
//! Invariant: under `exactly_once` the task never commits. It reports its
//! transaction (id, producer id, epoch) once every record is acknowledged,
//! and the driver commits it with the batch. A retry of the task, under the
//! same transactional id, fences this attempt and aborts what it wrote.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use futures::future::BoxFuture;
use sluice_common::secrets::Secrets;
use sluice_common::spec::KafkaSecurity;
use sluice_kafka::{Delivery, Kafka};
use sluice_proto::{KafkaTaskSink, KafkaWritten, PreparedTransaction, task_output};
use tokio::sync::mpsc;

use super::parts::{OutRecord, Piece};
use super::{Encode, SinkWriter, TaskOut, Written};
use crate::cache::Caches;
use crate::error::ExecutorError;

/// The deadline of each call to the brokers.
const DEADLINE: Duration = Duration::from_secs(10);

/// The Kafka sink a task writes.
pub struct KafkaWriter(pub KafkaTaskSink);

impl SinkWriter for KafkaWriter {
    fn encoder(&self, _: TaskOut, schema: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError> {
        Ok(Box::new(Records::new(&self.0, schema)?))
    }

    fn write<'a>(
        &'a self,
        caches: &'a Arc<Caches>,
        partition: u32,
        rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>> {
        Box::pin(async move {
            Ok(
                match deliver(&self.0, partition, &caches.secrets, rx).await? {
                    Some(w) => Written::Done(Some(task_output::Sink::Kafka(w))),
                    None => Written::Unfinished("the Kafka sink's records".into()),
                },
            )
        })
    }
}

impl Encode for Records {
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<Piece>) -> Result<u64, ExecutorError> {
        let (records, bytes) = self.encode(batch)?;
        out.push(Piece::Records(records));
        Ok(bytes)
    }

    fn finish(self: Box<Self>, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        out.push(Piece::RecordsEnd);
        Ok(())
    }
}

/// Turns output rows into records.
pub struct Records {
    raw: bool,
    key: Option<usize>,
    value: Option<usize>,
}

impl Records {
    /// The records of output of `schema` for `sink`; an output without the
    /// columns the sink names is refused by name.
    pub fn new(sink: &KafkaTaskSink, schema: &SchemaRef) -> Result<Self, ExecutorError> {
        let column = |field: &str, name: &str| {
            schema.index_of(name).map_err(|_| {
                ExecutorError::BadInput(format!(
                    "sink.kafka.{field}: {name:?} is not an output column of the query"
                ))
            })
        };
        let key = match (&sink.key, sink.raw) {
            (Some(k), _) => Some(column("key", k)?),
            (None, true) => schema.index_of("key").ok(),
            (None, false) => None,
        };
        let value = match sink.raw {
            true => Some(column("format", "value")?),
            false => None,
        };
        Ok(Records {
            raw: sink.raw,
            key,
            value,
        })
    }

    /// The records of `batch`'s rows, in row order, and their key and value
    /// bytes.
    pub fn encode(&self, batch: &RecordBatch) -> Result<(Vec<OutRecord>, u64), ExecutorError> {
        let values = match (self.raw, self.value) {
            (true, Some(i)) => bytes_of(batch.column(i), "value")?,
            _ => json_rows(batch)?,
        };
        let keys = match self.key {
            Some(i) => bytes_of(batch.column(i), "key")?,
            None => vec![None; batch.num_rows()],
        };
        let mut bytes = 0u64;
        let records = keys
            .into_iter()
            .zip(values)
            .map(|(key, value)| {
                let value = value.unwrap_or_default();
                bytes += (key.as_ref().map_or(0, Vec::len) + value.len()) as u64;
                OutRecord { key, value }
            })
            .collect();
        Ok((records, bytes))
    }
}

/// Each row of `batch` as a JSON object.
fn json_rows(batch: &RecordBatch) -> Result<Vec<Option<Vec<u8>>>, ExecutorError> {
    let text = sluice_common::sink::encode_jsonl(std::slice::from_ref(batch))?;
    // JSON escapes newlines inside strings: each line is one row.
    let rows: Vec<Option<Vec<u8>>> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| Some(l.to_vec()))
        .collect();
    if rows.len() != batch.num_rows() {
        return Err(ExecutorError::TaskPanicked(format!(
            "{} JSON lines for {} rows",
            rows.len(),
            batch.num_rows()
        )));
    }
    Ok(rows)
}

/// The bytes of each value of `col`: a binary column's own, any other
/// type's text; a null is none.
fn bytes_of(col: &ArrayRef, what: &str) -> Result<Vec<Option<Vec<u8>>>, ExecutorError> {
    let binary = match col.data_type() {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            arrow_cast::cast(col, &DataType::LargeBinary)
        }
        _ => arrow_cast::cast(col, &DataType::LargeUtf8)
            .and_then(|c| arrow_cast::cast(&c, &DataType::LargeBinary)),
    }
    .map_err(|e| {
        ExecutorError::BadInput(format!(
            "sink.kafka: the {what} column, of type {}, has no bytes: {e}",
            col.data_type()
        ))
    })?;
    let b = binary.as_binary::<i64>();
    Ok((0..b.len())
        .map(|i| b.is_valid(i).then(|| b.value(i).to_vec()))
        .collect())
}

/// Writes the records the channel brings into the topic; returns what was
/// written once the emitter is done: for `exactly_once`, the transaction
/// left open (none when the task wrote no record). A writer that fails, or
/// whose emitter stops before its end (`None`: the emitter says why),
/// aborts its transaction.
pub async fn deliver(
    sink: &KafkaTaskSink,
    partition: u32,
    secrets: &Secrets,
    mut rx: mpsc::Receiver<Piece>,
) -> Result<Option<KafkaWritten>, ExecutorError> {
    let first = match rx.recv().await {
        None => return Ok(None),
        Some(Piece::RecordsEnd) => return Ok(Some(KafkaWritten::default())),
        Some(p) => p,
    };
    let field = "sink.kafka.security";
    let security = KafkaSecurity::from_proto(sink.security.as_ref(), field)?;
    let kafka =
        Kafka::connect_secure(&sink.bootstrap_servers, &security, secrets, field, DEADLINE).await?;
    let partitions = kafka.partition_count(&sink.topic).await?;
    let own = (partition % partitions.max(1) as u32) as i32;
    let delivery = match sink.transactional_id_prefix.as_str() {
        "" => Delivery::AtLeastOnce,
        prefix => Delivery::ExactlyOnce {
            transactional_id: format!("{prefix}-{partition}"),
            timeout: Duration::from_millis(sink.transaction_timeout_ms),
        },
    };
    let mut writer = kafka.writer(&sink.topic, delivery).await?;
    let opened = Instant::now();
    let mut bytes = 0u64;
    let mut piece = Some(first);
    let sent: Result<bool, ExecutorError> = async {
        loop {
            match piece.take() {
                Some(Piece::Records(records)) => {
                    for r in records {
                        bytes += (r.key.as_ref().map_or(0, Vec::len) + r.value.len()) as u64;
                        let to = r.key.is_none().then_some(own);
                        writer.send(to, r.key, r.value, None).await?;
                    }
                }
                Some(Piece::RecordsEnd) => return Ok(true),
                Some(_) => {
                    return Err(ExecutorError::TaskPanicked(
                        "file bytes made for the Kafka sink".into(),
                    ));
                }
                None => return Ok(false),
            }
            piece = rx.recv().await;
        }
    }
    .await;
    match sent {
        Ok(true) => {}
        Ok(false) => {
            abort(writer).await;
            return Ok(None);
        }
        Err(e) => {
            abort(writer).await;
            return Err(e);
        }
    }
    let prepared = writer.finish().await?;
    if let Err(e) = kafka.close().await {
        tracing::debug!(error = %e, "closing the Kafka connection failed");
    }
    Ok(Some(KafkaWritten {
        bytes,
        open_ms: opened.elapsed().as_millis() as u64,
        transaction: prepared.map(|t| PreparedTransaction {
            transactional_id: t.transactional_id,
            producer_id: t.producer_id,
            producer_epoch: i32::from(t.producer_epoch),
        }),
    }))
}

/// Aborts a failed task's writer; a failure to is logged: the retry's
/// writer, under the same transactional id, aborts the transaction anyway.
async fn abort(writer: sluice_kafka::Writer) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(error = %e, "aborting the failed task's Kafka transaction failed; its retry fences it");
    }
}
