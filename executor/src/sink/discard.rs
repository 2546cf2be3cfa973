//! The discard sink on the executor: a task's output rows are counted
//! (their Arrow bytes, on the blocking side), nothing is written, and the
//! count is the task's report.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_proto::task_output;
use tokio::sync::mpsc;

use super::{Encode, Piece, SinkWriter, TaskOut, Written};
use crate::cache::Caches;
use crate::error::ExecutorError;

/// The discard sink: its rows are counted, and nothing is written.
pub struct Discard;

/// Counts the Arrow bytes of the rows (of their slices of shared buffers).
#[derive(Default)]
struct Counted(u64);

impl SinkWriter for Discard {
    fn encoder(&self, _: TaskOut, _: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError> {
        Ok(Box::<Counted>::default())
    }

    fn write<'a>(
        &'a self,
        _: &'a Arc<Caches>,
        _: u32,
        mut rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>> {
        Box::pin(async move {
            let mut report = None;
            while let Some(p) = rx.recv().await {
                match p {
                    Piece::Report(r @ task_output::Sink::Discard(_)) => report = Some(r),
                    _ => {
                        return Err(ExecutorError::TaskPanicked(
                            "output made for the discard sink".into(),
                        ));
                    }
                }
            }
            Ok(Written::Done(report))
        })
    }
}

impl Encode for Counted {
    fn write(&mut self, batch: &RecordBatch, _: &mut Vec<Piece>) -> Result<u64, ExecutorError> {
        self.0 += batch
            .columns()
            .iter()
            .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
            .sum::<u64>();
        Ok(0)
    }

    fn finish(self: Box<Self>, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        out.push(Piece::Report(task_output::Sink::Discard(
            sluice_proto::DiscardWritten { bytes: self.0 },
        )));
        Ok(())
    }
}
