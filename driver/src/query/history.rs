//! A query's progress history on a driver that has just become leader:
//! read back from `progress/` in the background, so that a failover neither
//! waits for it nor loses what clients saw before it.
//!
//! ```text
//!  load_all ─► restore task ─► qc.recent_progress(PROGRESS_RETAINED)
//!                                 │ ok: entry.restore(records)
//!                                 │ retryable: back off, read again
//!                                 └ damaged record / other error: logged;
//!                                   the history goes without it
//! ```

use std::sync::Arc;

use sluice_common::Error as CommonError;
use sluice_common::checkpoint::{CommitRecord, Log, PROGRESS_RETAINED, QueryCheckpoint};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::entry::QueryEntry;
use crate::batch_loop::retry::STORAGE_BACKOFF;
use crate::state::Term;

/// Starts restoring `entry`'s history, as a task owned by the term.
pub fn spawn_restore(term: &Term, entry: Arc<QueryEntry>, qc: QueryCheckpoint) {
    let span = info_span!("history", query = %entry.name, epoch = term.epoch);
    let cancel = term.cancel.clone();
    term.tasks
        .spawn(restore(entry, qc, cancel).instrument(span));
}

async fn restore(entry: Arc<QueryEntry>, qc: QueryCheckpoint, cancel: CancellationToken) {
    let mut streak = 0u32;
    loop {
        let read = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            read = qc.recent_progress(PROGRESS_RETAINED) => read,
        };
        match read {
            Ok(recent) => {
                for e in &recent.damaged {
                    warn!(error = %e, "a progress record is damaged; the history leaves its batch out");
                }
                let batches = recent.records.len();
                let records = recent
                    .records
                    .iter()
                    .map(|r| r.to_proto(&entry.id, &entry.name))
                    .collect();
                entry.restore(records);
                info!(batches, "progress history restored");
                return;
            }
            Err(e) if e.is_retryable() => {
                warn!(error = %e, attempt = streak + 1, "reading the progress history failed; retrying");
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(STORAGE_BACKOFF.delay(streak)) => {}
                }
                streak += 1;
            }
            Err(e) => {
                warn!(error = %e, "the progress history cannot be read; it starts empty");
                entry.restore(Vec::new());
                return;
            }
        }
    }
}

/// Sets what `entry`'s status shows of its committed batches from the
/// checkpoint: its last `commits/N` and the input rows up to it. A STOPPED
/// or FAILED query has no runner to read them; a running one's reads them
/// again when it resumes. A record that cannot be read is logged, and the
/// status shows no commit (a runner fails on it, naming it).
pub async fn show_committed(entry: &QueryEntry, qc: &QueryCheckpoint) {
    let read = async {
        let Some(batch) = qc.latest(Log::Commits).await? else {
            return Ok(None);
        };
        let c: CommitRecord = qc.require_entry(Log::Commits, batch).await?;
        Ok::<_, CommonError>(Some((batch, c.rows_so_far())))
    };
    match read.await {
        Ok(Some((batch, rows))) => entry.set_committed(batch as i64, rows),
        Ok(None) => {}
        Err(e) => warn!(query = %entry.name, error = %e, "the last commit cannot be read"),
    }
}
