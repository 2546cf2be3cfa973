//! The query's checkpoint behind the batch loop's [`BatchLog`] seam: its
//! logs read and written through the query's [`Ctx`], each call retried
//! under the term's fence.

use futures::future::BoxFuture;
use sluice_common::checkpoint::{CommitRecord, Log, OffsetRecord};

use super::ctx::Ctx;
use super::protocol::BatchLog;
use crate::error::DriverError;
use crate::failpoint::{self, Point};
use crate::query::commit_gate::Shield;

/// The checkpoint of the query, as its batch loop reads and writes it:
/// every call retried under the term's fence (see [`retried`]).
impl BatchLog for Ctx {
    fn latest(&self, log: Log) -> BoxFuture<'_, Result<Option<u64>, DriverError>> {
        Box::pin(self.storage("list the log", move || self.query.qc.latest(log)))
    }

    fn offsets(&self, batch: u64) -> BoxFuture<'_, Result<OffsetRecord, DriverError>> {
        let qc = &self.query.qc;
        Box::pin(self.storage("read offsets", move || {
            qc.require_entry(Log::Offsets, batch)
        }))
    }

    fn commit(&self, batch: u64) -> BoxFuture<'_, Result<CommitRecord, DriverError>> {
        let qc = &self.query.qc;
        Box::pin(self.storage("read commit", move || qc.require_entry(Log::Commits, batch)))
    }

    fn write_commit<'a>(
        &'a self,
        record: &'a CommitRecord,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(async move {
            // Only the end of the term ends this hold: a stop waits for
            // the commit under way, as it would for a slow one.
            tokio::select! {
                biased;
                () = failpoint::hold(Point::SinkCommitted, record.batch_id) => {}
                () = self.query.term.cancel.cancelled() => return Err(DriverError::Cancelled),
            }
            let qc = &self.query.qc;
            let (_, ours) = self
                .storage("write commit", || qc.write_commit(record))
                .await?;
            Ok(ours)
        })
    }

    fn shield(&self) -> Result<Shield<'_>, DriverError> {
        let entry = &self.query.entry;
        entry
            .commits
            .enter(&entry.stop)
            .ok_or(DriverError::Cancelled)
    }

    fn confirm_leadership(&self) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(self.query.driver.confirm_leadership(&self.query.term))
    }

    fn describe_entry(&self, log: Log, batch: u64) -> String {
        self.query.qc.describe_entry(log, batch)
    }

    fn describe_dir(&self) -> String {
        self.query.qc.describe_dir()
    }
}
