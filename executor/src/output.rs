//! A task's output rows into its sink, in bounded memory:
//!
//! ```text
//!  blocking thread: output batch ─► Emitter (the sink's Encode) ─► channel (2)
//!  the task:        channel ─► the sink's SinkWriter::write ─► its report
//! ```
//!
//! A file is begun with its first bytes: a task whose output is empty
//! writes nothing at all. Dropping the writer's future (a cancelled task)
//! stops the emitter and removes the unfinished files.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_proto::task_output;
use tokio::sync::mpsc;

use crate::error::ExecutorError;
use crate::sink::{Encode, Piece, SinkWriter, TaskOut, Written};

/// Pieces of encoded rows in flight between the emitter and the writer.
const CHUNKS_IN_FLIGHT: usize = 2;

/// The channel between an [`Emitter`] and the sink's writer.
pub fn channel() -> (mpsc::Sender<Piece>, mpsc::Receiver<Piece>) {
    mpsc::channel(CHUNKS_IN_FLIGHT)
}

/// What an [`Emitter`] emitted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Emitted {
    pub rows: u64,
}

/// What a task delivered to its sink: the report of the sink's kind, none
/// when it wrote nothing.
pub type Delivered = Option<task_output::Sink>;

/// The cap on a task's output of a plan's `max_output_bytes`: 0 is none.
pub fn task_cap(max_output_bytes: u64) -> u64 {
    match max_output_bytes {
        0 => u64::MAX,
        n => n,
    }
}

/// The blocking side: encodes output batches into the sink's pieces.
pub struct Emitter {
    encoder: Box<dyn Encode>,
    tx: mpsc::Sender<Piece>,
    pieces: Vec<Piece>,
    rows: u64,
    /// Bytes encoded so far, and the most the task may write.
    bytes: u64,
    max_bytes: u64,
}

impl Emitter {
    /// The emitter of output of `schema` into `sink` for task `task`, of
    /// at most `max_bytes` (see [`task_cap`]).
    pub fn new(
        sink: &dyn SinkWriter,
        task: TaskOut,
        max_bytes: u64,
        schema: &SchemaRef,
        tx: mpsc::Sender<Piece>,
    ) -> Result<Self, ExecutorError> {
        Ok(Emitter {
            encoder: sink.encoder(task, schema)?,
            tx,
            pieces: Vec::new(),
            rows: 0,
            bytes: 0,
            max_bytes,
        })
    }

    /// Encodes and sends one batch; `false` once the writer is gone (failed
    /// or cancelled), when there is no point in going on.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<bool, ExecutorError> {
        self.rows += batch.num_rows() as u64;
        self.bytes += self.encoder.write(batch, &mut self.pieces)?;
        self.count()?;
        Ok(self.send())
    }

    /// Fails the task once its output passes its cap: a query that makes
    /// far more output than input (an `unnest` of a large range, say)
    /// fails, naming the cap, before it fills the disk.
    fn count(&self) -> Result<(), ExecutorError> {
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
            encoder,
            tx,
            mut pieces,
            rows,
            ..
        } = self;
        encoder.finish(&mut pieces)?;
        send(&tx, &mut pieces);
        Ok(Emitted { rows })
    }

    fn send(&mut self) -> bool {
        send(&self.tx, &mut self.pieces)
    }
}

fn send(tx: &mpsc::Sender<Piece>, pieces: &mut Vec<Piece>) -> bool {
    pieces.drain(..).all(|p| tx.blocking_send(p).is_ok())
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
