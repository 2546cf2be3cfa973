//! A task's output rows into sink part files, or Kafka records, in bounded
//! memory:
//!
//! ```text
//!  blocking thread: output batch ─► Emitter (Parts: encode | Records) ─► channel (2)
//!  the task:        channel ─► write: part file writers (multipart)
//!                                   | the Kafka writer (sink::kafka::deliver)
//! ```
//!
//! A file is begun with its first bytes: a task whose output is empty
//! writes nothing at all. Dropping the writer's future (a cancelled task)
//! stops the emitter and removes the unfinished files.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_common::secrets::Secrets;
use sluice_common::sink::FileSink;
use sluice_common::storage::VisibleWriter;
use sluice_proto::{KafkaTaskSink, KafkaWritten, SinkFile, TaskSink};
use tokio::sync::mpsc;

use crate::cache::Caches;
use crate::error::ExecutorError;
use crate::sink::kafka::{self, Records};
use crate::sink::parts::{Layout, Parts, Piece};

/// Pieces of encoded rows in flight between the emitter and the writer.
const CHUNKS_IN_FLIGHT: usize = 2;

/// The channel between an [`Emitter`] and [`write_files`].
pub fn channel() -> (mpsc::Sender<Piece>, mpsc::Receiver<Piece>) {
    mpsc::channel(CHUNKS_IN_FLIGHT)
}

/// Where a task's output goes.
pub enum Sink {
    Discard,
    Files(FileSink),
    /// The Kafka sink, written by the task of this partition, with the
    /// secrets its settings may name.
    Kafka(Box<KafkaTaskSink>, u32, Secrets),
}

/// The sink `sink` names (a file sink opened on first use), for the task
/// of `partition`.
pub async fn open_sink(
    caches: &Arc<Caches>,
    sink: &TaskSink,
    partition: u32,
) -> Result<Sink, ExecutorError> {
    if let Some(k) = &sink.kafka {
        let secrets = caches.secrets.clone();
        return Ok(Sink::Kafka(Box::new(k.clone()), partition, secrets));
    }
    if sink.discard {
        return Ok(Sink::Discard);
    }
    let (caches, path) = (caches.clone(), sink.path.clone());
    tokio::task::spawn_blocking(move || caches.sink(&path).map(Sink::Files))
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?
}

/// What an [`Emitter`] emitted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Emitted {
    pub rows: u64,
    /// The discard sink: the Arrow bytes of the rows.
    pub discarded_bytes: u64,
}

/// The Arrow bytes of `batch`'s rows (of its slice of shared buffers).
fn arrow_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

/// The cap on a task's output of a plan's `max_output_bytes`: 0 is none.
pub fn task_cap(max_output_bytes: u64) -> u64 {
    match max_output_bytes {
        0 => u64::MAX,
        n => n,
    }
}

/// What an [`Emitter`] makes of output rows.
enum Target {
    /// The discard sink: nothing; rows are counted.
    Discard,
    Files(Box<Parts>),
    Kafka(Records),
}

/// The blocking side: encodes output batches into pieces of part files or
/// Kafka records (for the discard sink, counts them).
pub struct Emitter {
    target: Target,
    tx: mpsc::Sender<Piece>,
    pieces: Vec<Piece>,
    rows: u64,
    /// Bytes encoded so far, and the most the task may write.
    bytes: u64,
    max_bytes: u64,
    /// The discard sink: the Arrow bytes of the rows counted.
    discarded: u64,
}

impl Emitter {
    pub fn new(
        layout: Layout,
        schema: &SchemaRef,
        tx: mpsc::Sender<Piece>,
    ) -> Result<Self, ExecutorError> {
        let max_bytes = layout.max_task_bytes;
        let target = match (&layout.kafka, layout.discard) {
            (Some(k), _) => Target::Kafka(Records::new(k, schema)?),
            (None, true) => Target::Discard,
            (None, false) => Target::Files(Box::new(Parts::new(layout, schema)?)),
        };
        Ok(Emitter {
            target,
            tx,
            pieces: Vec::new(),
            rows: 0,
            bytes: 0,
            max_bytes,
            discarded: 0,
        })
    }

    /// Encodes and sends one batch; `false` once the writer is gone (failed
    /// or cancelled), when there is no point in going on.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<bool, ExecutorError> {
        self.rows += batch.num_rows() as u64;
        match &mut self.target {
            Target::Discard => {
                self.discarded += arrow_bytes(batch);
                return Ok(true);
            }
            Target::Files(parts) => parts.write(batch, &mut self.pieces)?,
            Target::Kafka(records) => {
                let (records, bytes) = records.encode(batch)?;
                self.bytes += bytes;
                self.pieces.push(Piece::Records(records));
            }
        }
        self.count()?;
        Ok(self.send())
    }

    /// Fails the task once its output passes its cap: a query that makes
    /// far more output than input (an `unnest` of a large range, say)
    /// fails, naming the cap, before it fills the disk.
    fn count(&mut self) -> Result<(), ExecutorError> {
        for p in &self.pieces {
            if let Piece::Data { bytes, .. } = p {
                self.bytes += bytes.len() as u64;
            }
        }
        if self.bytes > self.max_bytes {
            return Err(ExecutorError::OutputTooLarge {
                bytes: self.bytes,
                limit: self.max_bytes,
            });
        }
        Ok(())
    }

    /// Ends every open file; returns what was written.
    pub fn finish(self) -> Result<Emitted, ExecutorError> {
        let Emitter {
            target,
            tx,
            mut pieces,
            rows,
            discarded,
            ..
        } = self;
        match target {
            Target::Discard => {}
            Target::Files(parts) => parts.finish(&mut pieces)?,
            Target::Kafka(_) => pieces.push(Piece::RecordsEnd),
        }
        send(&tx, &mut pieces);
        Ok(Emitted {
            rows,
            discarded_bytes: discarded,
        })
    }

    fn send(&mut self) -> bool {
        send(&self.tx, &mut self.pieces)
    }
}

fn send(tx: &mpsc::Sender<Piece>, pieces: &mut Vec<Piece>) -> bool {
    pieces.drain(..).all(|p| tx.blocking_send(p).is_ok())
}

/// The async side: writes the pieces into the sink, and returns what was
/// written once the emitter is done. The discard sink gets no piece.
pub async fn write(sink: &Sink, mut rx: mpsc::Receiver<Piece>) -> Result<Written, ExecutorError> {
    match sink {
        Sink::Files(files) => write_files(files, rx).await,
        Sink::Kafka(k, partition, secrets) => {
            Ok(match kafka::deliver(k, *partition, secrets, rx).await? {
                Some(w) => Written::Done(Delivered {
                    kafka: Some(w),
                    ..Default::default()
                }),
                None => Written::Unfinished("the Kafka sink's records".into()),
            })
        }
        Sink::Discard => match rx.recv().await {
            None => Ok(Written::Done(Delivered::default())),
            Some(_) => Err(ExecutorError::TaskPanicked(
                "output made for the discard sink".into(),
            )),
        },
    }
}

/// Writes the pieces into part files, create-only.
async fn write_files(
    sink: &FileSink,
    mut rx: mpsc::Receiver<Piece>,
) -> Result<Written, ExecutorError> {
    let mut writers: HashMap<Arc<str>, VisibleWriter> = HashMap::new();
    let mut files = Vec::new();
    while let Some(piece) = rx.recv().await {
        match piece {
            Piece::Data { name, bytes } => {
                if !writers.contains_key(&name) {
                    let w = sink.begin_part(&name).await?;
                    writers.insert(name.clone(), w);
                }
                writers
                    .get_mut(&name)
                    .expect("begun above")
                    .write(bytes)
                    .await?;
            }
            Piece::End { name, rows } => {
                let w = writers.remove(&name).ok_or_else(|| {
                    ExecutorError::TaskPanicked(format!("{name} ended before any bytes"))
                })?;
                let f = sink.finish_part(w, &name, rows).await?;
                files.push(SinkFile {
                    path: f.path,
                    rows: f.rows,
                    bytes: f.bytes,
                });
            }
            Piece::Records(_) | Piece::RecordsEnd => {
                return Err(ExecutorError::TaskPanicked(
                    "Kafka records made for the file sink".into(),
                ));
            }
        }
    }
    match writers.into_keys().next() {
        Some(name) => Ok(Written::Unfinished(name)),
        None => Ok(Written::Done(Delivered { files, kafka: None })),
    }
}

/// What a task delivered to its sink.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The file sink's part files.
    pub files: Vec<SinkFile>,
    /// The Kafka sink's records and transaction.
    pub kafka: Option<KafkaWritten>,
}

/// What [`write`] saw once the channel closed.
pub enum Written {
    /// Every part file that began was finished; every record was sent.
    Done(Delivered),
    /// The emitter stopped in the middle of this file (or the records).
    Unfinished(Arc<str>),
}

/// Joins the writer's outcome with the emitter's. A write error wins (the
/// emitter then only saw the channel close); else the emitter's own error
/// wins, since it says why the stream stopped mid-file; a file left
/// unfinished by an emitter that says it succeeded is a bug.
pub fn settle<T>(
    written: Result<Written, ExecutorError>,
    emitted: Result<T, ExecutorError>,
) -> Result<(Delivered, T), ExecutorError> {
    match (written?, emitted?) {
        (Written::Done(delivered), emitted) => Ok((delivered, emitted)),
        (Written::Unfinished(name), _) => Err(ExecutorError::TaskPanicked(format!(
            "{name} was never finished"
        ))),
    }
}
