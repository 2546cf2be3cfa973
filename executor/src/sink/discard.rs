//! The discard sink on the executor: a task's output rows are counted
//! (their Arrow bytes, on the blocking side), nothing is written, and the
//! count is the task's report.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_proto::task_output;
use tokio::sync::mpsc;

use super::{Encode, Piece, SinkWriter, TaskOut, Written};
use crate::cache::Caches;
use crate::error::ExecutorError;

/// The discard sink of one task: its rows are counted, and nothing is
/// written.
#[derive(Default)]
pub struct Discard {
    /// The Arrow bytes its encoder counted.
    counted: Arc<AtomicU64>,
}

/// Counts the Arrow bytes of the rows (of their slices of shared buffers).
struct Counted(Arc<AtomicU64>);

impl SinkWriter for Discard {
    fn encoder(&self, _: TaskOut, _: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError> {
        Ok(Box::new(Counted(self.counted.clone())))
    }

    /// The encoder sends no piece: once the channel closes, it has counted
    /// every row.
    fn write<'a>(
        &'a self,
        _: &'a Arc<Caches>,
        _: u32,
        mut rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>> {
        Box::pin(async move {
            if let Some(p) = rx.recv().await {
                return Err(ExecutorError::TaskPanicked(format!(
                    "{p:?} made for the discard sink"
                )));
            }
            let bytes = self.counted.load(Ordering::Acquire);
            let report = task_output::Sink::Discard(sluice_proto::DiscardWritten { bytes });
            Ok(Written::Done(Some(report)))
        })
    }
}

impl Encode for Counted {
    fn write(&mut self, batch: &RecordBatch, _: &mut Vec<Piece>) -> Result<u64, ExecutorError> {
        let bytes: u64 = batch
            .columns()
            .iter()
            .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
            .sum();
        self.0.fetch_add(bytes, Ordering::Release);
        Ok(0)
    }

    fn finish(self: Box<Self>, _: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        Ok(())
    }
}
