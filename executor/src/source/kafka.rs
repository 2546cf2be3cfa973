//! The Kafka source's reader: one partition's offsets `[start, end)`,
//! fetched a few MiB at a time and decoded into the query's `input` rows.
//!
//! ```text
//!  connect ─► fetch(from) ─► keep offsets < end ─► decode ─► batch ─┐
//!               ▲                                                   │
//!               └──────────── from = last offset + 1 ◄──────────────┘  until from ≥ end
//!  a fetch that starts past `from`: ask for the earliest offset ─► records gone
//!        (fail_on_data_loss: the task fails naming them; else they are counted)
//!  a fetch with no record whose position moved on: offsets without a record
//!        to read (transaction markers, aborted transactions), skipped
//! ```
//!
//! Invariant: the reader never returns a record at or past `end`, and
//! returns the records of the range in offset order, so a replay of the
//! plan reads the same rows.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{
    ArrayRef, BinaryArray, Int32Array, Int64Array, RecordBatch, TimestampMillisecondArray,
};
use arrow_schema::{Schema, SchemaRef};
use futures::StreamExt;
use sluice_common::secrets::Secrets;
use sluice_common::spec::{CsvOptions, Format, KAFKA_COLUMNS, KafkaFormat, KafkaSecurity};
use sluice_kafka::{Kafka, KafkaRecord, Partition};
use sluice_proto::KafkaTask;

use super::files::lines::{LineFormat, decode};
use super::{Batches, Columns, ReadCounters, SourceReader};
use crate::error::ExecutorError;

/// The deadline of each call to the broker.
const DEADLINE: Duration = Duration::from_secs(10);
/// The most bytes one fetch asks for.
const FETCH_BYTES: i32 = 8 << 20;
/// How long a fetch waits for records (they exist: the plan saw them).
const FETCH_WAIT: Duration = Duration::from_millis(500);

pub struct KafkaReader {
    task: KafkaTask,
    format: KafkaFormat,
    schema: SchemaRef,
    secrets: Secrets,
}

impl KafkaReader {
    /// The reader of `task`, whose settings' files and variable are read
    /// as `secrets` allows.
    pub fn new(
        task: KafkaTask,
        schema: SchemaRef,
        secrets: Secrets,
    ) -> Result<Self, ExecutorError> {
        let bad = |m: String| Err(ExecutorError::MalformedTask(format!("kafka source: {m}")));
        let Some(format) = KafkaFormat::parse(&task.format) else {
            return bad(format!("unknown format {:?}", task.format));
        };
        if task.start < 0 || task.end < task.start || task.partition < 0 {
            return bad(format!(
                "partition {} offsets {}..{} are not a range",
                task.partition, task.start, task.end
            ));
        }
        let n = schema.fields().len();
        let tail: Vec<&str> = schema.fields()[n.saturating_sub(3)..]
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        if tail != KAFKA_COLUMNS {
            return bad(format!(
                "the input schema does not end with {KAFKA_COLUMNS:?}"
            ));
        }
        Ok(KafkaReader {
            task,
            format,
            schema,
            secrets,
        })
    }
}

impl SourceReader for KafkaReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn planned_rows(&self) -> Option<u64> {
        None
    }

    fn read(self: Box<Self>, columns: Columns, counters: ReadCounters) -> Batches {
        let width = self.schema.fields().len() - 3;
        let value_schema = Arc::new(Schema::new(self.schema.fields()[..width].to_vec()));
        let decoded: Vec<usize> = match self.format {
            KafkaFormat::Raw => (0..width).collect(),
            // The value's columns read, or the first when none is (a value
            // is still checked to be a record).
            KafkaFormat::Json => {
                let read: Vec<usize> = columns
                    .indexes()
                    .iter()
                    .copied()
                    .filter(|&c| c < width)
                    .collect();
                if read.is_empty() { vec![0] } else { read }
            }
        };
        let state = State {
            from: self.task.start,
            decoder: Decoder {
                format: self.format,
                schema: columns.project(&self.schema),
                lines: LineFormat {
                    format: Format::Jsonl,
                    schema: value_schema,
                    columns: Some(decoded.clone()),
                    csv: CsvOptions::default(),
                    skip_bad: self.task.skip_bad_records,
                },
                columns,
                decoded,
                partition: self.task.partition,
                at: format!(
                    "kafka topic {:?} partition {}",
                    self.task.topic, self.task.partition
                ),
            },
            task: self.task,
            secrets: self.secrets,
            client: None,
            counters,
        };
        futures::stream::try_unfold(state, |mut s| async move {
            match s.next().await? {
                Some(batch) => Ok(Some((batch, s))),
                None => {
                    s.close().await;
                    Ok(None)
                }
            }
        })
        .boxed()
    }
}

/// Where a read stands.
struct State {
    task: KafkaTask,
    secrets: Secrets,
    from: i64,
    client: Option<Partition>,
    counters: ReadCounters,
    decoder: Decoder,
}

impl State {
    /// The next non-empty batch of the range; `None` at its end.
    async fn next(&mut self) -> Result<Option<RecordBatch>, ExecutorError> {
        while self.from < self.task.end {
            let end = self.task.end;
            let client = match &self.client {
                Some(c) => c,
                None => match self.connect().await? {
                    Some(c) => self.client.insert(c),
                    None => return Ok(None),
                },
            };
            let fetched = client.fetch(self.from, FETCH_BYTES, FETCH_WAIT).await?;
            let first = fetched.records.first().map(|r| r.offset);
            if first.is_none_or(|f| f > self.from) {
                // Records are missing before `first`, or none was served:
                // gone, offsets without a record to read (transaction
                // markers, aborted transactions, compaction), or not
                // served yet.
                let (earliest, latest) = (client.earliest().await?, client.latest().await?);
                let gone_to = if latest < self.from {
                    end
                } else {
                    earliest.min(first.unwrap_or(end)).min(end)
                };
                if gone_to > self.from {
                    let why = format!("the earliest offset kept is {earliest}");
                    self.lost(self.from, gone_to, &why)?;
                    self.from = gone_to;
                    continue;
                }
                if first.is_none() {
                    if fetched.next >= end {
                        // Nothing left to read below `end`.
                        return Ok(None);
                    }
                    if fetched.next > self.from {
                        self.from = fetched.next;
                        continue;
                    }
                    // The records exist (the plan saw them) but the broker
                    // has not served them yet.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
            let records: Vec<KafkaRecord> = fetched
                .records
                .into_iter()
                .take_while(|r| r.offset < end)
                .collect();
            let Some(last) = records.last() else {
                return Ok(None);
            };
            self.from = last.offset + 1;
            let batch = self.decoder.decode(&records, &self.counters)?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }

    /// Closes the partition's client at the end of the range. Its records
    /// are all read, so a failure to close is logged, not returned.
    async fn close(&mut self) {
        if let Some(client) = self.client.take()
            && let Err(error) = client.close().await
        {
            tracing::warn!(at = %self.decoder.at, %error, "closing the kafka consumer failed");
        }
    }

    /// A client of the partition; `None` when the topic or partition is
    /// gone and the loss is accepted (the rest of the range is counted).
    async fn connect(&mut self) -> Result<Option<Partition>, ExecutorError> {
        let t = &self.task;
        let field = "source.kafka.security";
        let security = KafkaSecurity::from_proto(t.security.as_ref(), field)?;
        let kafka = Kafka::connect_secure(
            &t.bootstrap_servers,
            &security,
            &self.secrets,
            field,
            DEADLINE,
        )
        .await?;
        match kafka.partition(&t.topic, t.partition, false).await {
            Ok(c) => Ok(Some(c.committed_only(!t.read_uncommitted))),
            Err(e) if !e.is_retryable() => {
                let (from, end) = (self.from, self.task.end);
                self.lost(from, end, &e.to_string())?;
                self.from = end;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Offsets `[from, to)` of the range are gone (`why`): fails, or
    /// counts them.
    fn lost(&self, from: i64, to: i64, why: &str) -> Result<(), ExecutorError> {
        if self.task.fail_on_data_loss {
            return Err(sluice_common::Error::DataLoss(format!(
                "{}: offsets {from}..{to} of the batch's range {}..{} are gone ({why}: \
                 retention deleted them, or the topic was recreated). Set \
                 fail_on_data_loss: false to skip them",
                self.decoder.at, self.task.start, self.task.end
            ))
            .into());
        }
        self.counters.records_lost.add((to - from) as u64);
        Ok(())
    }
}

/// Turns fetched records into rows of the `input` table.
struct Decoder {
    format: KafkaFormat,
    /// The schema of the columns read.
    schema: SchemaRef,
    /// How a JSON value decodes (the declared columns decoded).
    lines: LineFormat,
    /// The columns read, as indexes into the input schema: the value's
    /// columns, then the partition, offset and timestamp.
    columns: Columns,
    /// The value's columns decoded, ascending: for a raw value, the key
    /// and the value.
    decoded: Vec<usize>,
    partition: i32,
    /// "kafka topic "t" partition 0", in errors.
    at: String,
}

impl Decoder {
    fn decode(
        &self,
        records: &[KafkaRecord],
        counters: &ReadCounters,
    ) -> Result<RecordBatch, ExecutorError> {
        let (values, kept): (Vec<ArrayRef>, Vec<&KafkaRecord>) = match self.format {
            KafkaFormat::Raw => {
                let key = BinaryArray::from_iter(records.iter().map(|r| r.key.as_deref()));
                let value = BinaryArray::from_iter(records.iter().map(|r| r.value.as_deref()));
                (
                    vec![Arc::new(key), Arc::new(value)],
                    records.iter().collect(),
                )
            }
            KafkaFormat::Json => self.json(records, counters)?,
        };
        let n = kept.len();
        let width = self.lines.schema.fields().len();
        let column = |c: usize| -> ArrayRef {
            match c.checked_sub(width) {
                None => {
                    // Invariant: a value column read is one decoded.
                    let i = self.decoded.iter().position(|&d| d == c);
                    values[i.expect("a value column read is decoded")].clone()
                }
                Some(0) => Arc::new(Int32Array::from(vec![self.partition; n])),
                Some(1) => Arc::new(Int64Array::from_iter_values(kept.iter().map(|r| r.offset))),
                Some(_) => Arc::new(TimestampMillisecondArray::from_iter_values(
                    kept.iter().map(|r| r.timestamp_ms),
                )),
            }
        };
        let columns = self.columns.indexes().iter().map(|&c| column(c)).collect();
        RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| ExecutorError::BadInput(format!("{}: {e}", self.at)))
    }

    /// The declared columns of the records' JSON values, and the records
    /// they came from: the bad ones are skipped and counted, or fail the
    /// task naming their offset.
    fn json<'r>(
        &self,
        records: &'r [KafkaRecord],
        counters: &ReadCounters,
    ) -> Result<(Vec<ArrayRef>, Vec<&'r KafkaRecord>), ExecutorError> {
        let value = |r: &'r KafkaRecord| r.value.as_deref().unwrap_or_default();
        let blank = |r: &KafkaRecord| {
            r.value
                .as_deref()
                .is_none_or(|v| v.iter().all(u8::is_ascii_whitespace))
        };
        let fast = (!records.iter().any(blank))
            .then(|| decode(&self.lines, records.iter().map(value)).ok())
            .flatten();
        let (batch, kept) = match fast {
            Some(b) => (b, records.iter().collect()),
            None => {
                let mut kept = Vec::with_capacity(records.len());
                for r in records {
                    let why = if blank(r) {
                        Some("the record has no value".to_string())
                    } else {
                        decode(&self.lines, std::iter::once(value(r)))
                            .err()
                            .map(|e| e.to_string())
                    };
                    match why {
                        None => kept.push(r),
                        Some(_) if self.lines.skip_bad => counters.bad_records.add(1),
                        Some(why) => {
                            return Err(ExecutorError::BadInput(format!(
                                "{} offset {}: the value is not a JSON record of the schema: {why}",
                                self.at, r.offset
                            )));
                        }
                    }
                }
                let batch = decode(&self.lines, kept.iter().map(|r| value(r))).map_err(|e| {
                    ExecutorError::BadInput(format!(
                        "{}: values that decode one by one do not decode together: {e}",
                        self.at
                    ))
                })?;
                (batch, kept)
            }
        };
        Ok((batch.columns().to_vec(), kept))
    }
}
