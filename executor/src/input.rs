//! A task's input as the SQL engine reads it: the source reader's batches,
//! counted, with the reader's own error kept aside so that its kind
//! (a storage error may pass; a malformed record will not) survives the
//! trip through DataFusion.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;

use crate::error::ExecutorError;
use crate::source::Batches;

/// Rows read so far, shared with the task.
#[derive(Debug, Default, Clone)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

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
}

impl Input {
    pub fn new(batches: Batches) -> Self {
        Input {
            batches,
            read: Counter::default(),
            failure: Failure::default(),
        }
    }
}

impl Iterator for Input {
    type Item = Result<RecordBatch, sluice_sql::InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.batches.next()? {
            Ok(b) => {
                self.read.0.fetch_add(b.num_rows() as u64, Ordering::AcqRel);
                Some(Ok(b))
            }
            Err(e) => {
                let message = e.to_string();
                *self.failure.0.lock().expect("input failure lock poisoned") = Some(e);
                Some(Err(message.into()))
            }
        }
    }
}
