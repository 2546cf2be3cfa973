//! What a sink may touch of its running query (its narrow door): the
//! query's checkpoint, the stores and secrets, storage and broker calls
//! retried under the term's fence, the term's epoch and its background
//! tasks. Nothing else of the runner: not the scheduler, the sources, or
//! other queries.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use sluice_common::checkpoint::QueryCheckpoint;

use crate::batch_loop::ctx::{self, Query};
use crate::config::DriverConfig;
use crate::error::DriverError;
use crate::failpoint::{self, Point};
use crate::query::entry::QueryEntry;
use crate::state::{Driver, Term};

/// A sink's handles on its query; cheap to clone.
#[derive(Clone)]
pub struct SinkIo {
    driver: Arc<Driver>,
    term: Arc<Term>,
    entry: Arc<QueryEntry>,
    qc: QueryCheckpoint,
    output: SchemaRef,
}

impl SinkIo {
    /// The door of `query`, whose SQL outputs columns `output`.
    pub fn of(query: &Query, output: SchemaRef) -> Self {
        SinkIo {
            driver: query.driver.clone(),
            term: query.term.clone(),
            entry: query.entry.clone(),
            qc: query.qc.clone(),
            output,
        }
    }

    /// The query's id (its name may be used again by another query).
    pub fn query_id(&self) -> &str {
        &self.entry.id
    }

    /// The columns of the query's output, as its SQL plans now.
    pub fn output(&self) -> &SchemaRef {
        &self.output
    }

    /// The query's checkpoint.
    pub fn checkpoint(&self) -> &QueryCheckpoint {
        &self.qc
    }

    /// The driver's settings (stores, secrets, retention, compaction).
    pub fn config(&self) -> &DriverConfig {
        &self.driver.config
    }

    /// The epoch of the term the query runs in.
    pub fn epoch(&self) -> u64 {
        self.term.epoch
    }

    /// Runs a storage or broker operation, retried while its errors are
    /// retryable and the term may still commit (see [`ctx::retried`]).
    pub async fn storage<T, F, Fut>(&self, what: &str, op: F) -> Result<T, DriverError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = sluice_common::Result<T>>,
    {
        ctx::retried(&self.term, &self.entry, what, op).await
    }

    /// Sleeps unless the query is stopped first.
    pub async fn sleep(&self, d: Duration) -> Result<(), DriverError> {
        ctx::sleep(&self.entry, d).await
    }

    /// Holds batch `batch` at `point` while a test has it armed (see
    /// [`failpoint`]); the query's stop, or the end of the term, ends the
    /// wait.
    pub async fn hold(&self, point: Point, batch: u64) -> Result<(), DriverError> {
        tokio::select! {
            biased;
            () = failpoint::hold(point, batch) => Ok(()),
            // Sleeps until the query stops: then an error.
            stopped = self.sleep(Duration::MAX) => stopped,
        }
    }

    /// Confirms that this driver still leads, after finding a record
    /// another driver wrote.
    pub async fn confirm_leadership(&self) -> Result<(), DriverError> {
        self.driver.confirm_leadership(&self.term).await
    }

    /// Runs `work` in the background, owned by the term (it ends with it).
    pub fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.term.tasks.spawn(work);
    }
}
