//! A task's input as the SQL engine reads it: the source reader's batches,
//! counted, with the reader's own error kept aside so that its kind
//! (a storage error may pass; a malformed record will not) survives the
//! trip through DataFusion.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use futures::Stream;

pub use crate::counter::Counter;
use crate::error::ExecutorError;
use crate::late::LateFilter;
use crate::source::Batches;

/// The first error of the input, shared with the task.
#[derive(Debug, Default, Clone)]
pub struct Failure(Arc<Mutex<Option<ExecutorError>>>);

impl Failure {
    pub fn take(&self) -> Option<ExecutorError> {
        self.0.lock().expect("input failure lock poisoned").take()
    }
}

pub struct Input {
    batches: Batches,
    pub read: Counter,
    pub failure: Failure,
    /// A query with a watermark: late rows are dropped here.
    late: Option<LateFilter>,
}

impl Input {
    /// The input of `batches`, counting rows in `read` and keeping its
    /// first error in `failure`.
    pub fn new(
        batches: Batches,
        late: Option<LateFilter>,
        (read, failure): (Counter, Failure),
    ) -> Self {
        Input {
            batches,
            read,
            failure,
            late,
        }
    }
}

impl Stream for Input {
    type Item = Result<RecordBatch, sluice_sql::InputError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = match self.batches.as_mut().poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(next)) => next,
        };
        Poll::Ready(Some(match next {
            Ok(b) => {
                self.read.add(b.num_rows() as u64);
                match &self.late {
                    None => Ok(b),
                    Some(late) => late.apply(b).map_err(|e| {
                        let message = e.to_string();
                        *self.failure.0.lock().expect("input failure lock poisoned") = Some(e);
                        message.into()
                    }),
                }
            }
            Err(e) => {
                let message = e.to_string();
                *self.failure.0.lock().expect("input failure lock poisoned") = Some(e);
                Err(message.into())
            }
        }))
    }
}
