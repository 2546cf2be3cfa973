//! What a source planner may touch of its query (its narrow door): the
//! query's checkpoint, the stores, storage calls retried under the term's
//! fence, the query's error slot, the allowed paths and the secrets
//! policy. Nothing else of
//! the runner: not the scheduler, the sink, or other queries.

use std::future::Future;
use std::sync::Arc;

use sluice_common::checkpoint::QueryCheckpoint;
use sluice_common::secrets::Secrets;
use sluice_common::storage::{AllowedPaths, Stores};

use crate::batch_loop::ctx::{self, Query};
use crate::error::DriverError;
use crate::query::entry::QueryEntry;
use crate::state::Term;

/// A source planner's handles on its query; cheap to clone.
#[derive(Clone)]
pub struct SourceIo {
    qc: QueryCheckpoint,
    /// The spec field of the source: `source`, or `sources.<table>`.
    field: String,
    /// The stream table the source feeds.
    table: String,
    stores: Stores,
    allowed: AllowedPaths,
    secrets: Secrets,
    term: Arc<Term>,
    entry: Arc<QueryEntry>,
}

impl SourceIo {
    /// The door of `query`.
    pub fn of(query: &Query) -> Self {
        SourceIo {
            qc: query.qc.clone(),
            field: "source".into(),
            table: sluice_common::spec::INPUT.into(),
            stores: query.driver.config.stores.clone(),
            allowed: query.driver.config.allowed_paths.clone(),
            secrets: query.driver.config.secrets.clone(),
            term: query.term.clone(),
            entry: query.entry.clone(),
        }
    }

    /// The door of input stream `table` of a query with `sources:`: its
    /// source records are its own (see [`QueryCheckpoint::input`]).
    pub fn input(&self, table: &str) -> Self {
        SourceIo {
            qc: self.qc.input(table),
            field: format!("sources.{table}"),
            table: table.to_string(),
            ..self.clone()
        }
    }

    /// The spec field of the source, for errors: `source` or
    /// `sources.<table>`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The stream table the source feeds.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The query's checkpoint, as the source sees it.
    pub fn checkpoint(&self) -> &QueryCheckpoint {
        &self.qc
    }

    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// Which files and variables the source's settings may name.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Runs a storage operation, retried while its errors are retryable
    /// and the term may still commit (see [`ctx::retried`]).
    pub async fn storage<T, F, Fut>(&self, what: &str, op: F) -> Result<T, DriverError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = sluice_common::Result<T>>,
    {
        ctx::retried(&self.term, &self.entry, what, op).await
    }

    /// Shows `message` as the query's error while the source waits for
    /// something (an empty message clears it).
    pub fn report(&self, message: String) {
        self.entry.set_error(message);
    }

    /// Refuses input files of a batch (`paths` under the directory `root`)
    /// when one is outside the allowed paths: a symbolic link put there
    /// after submit. The query fails naming the file and `field`, before
    /// any task reads it. Checked as at submit, with the links followed.
    pub async fn check_allowed(
        &self,
        field: &str,
        root: &str,
        paths: Vec<String>,
    ) -> Result<(), DriverError> {
        let allowed = self.allowed.clone();
        let (field, root) = (field.to_string(), root.to_string());
        tokio::task::spawn_blocking(move || {
            paths.iter().try_for_each(|p| {
                allowed
                    .check_file_resolved(&field, &root, p)
                    .map_err(DriverError::Invalid)
            })
        })
        .await
        .map_err(|e| DriverError::Internal(format!("the check of new input files panicked: {e}")))?
    }
}
