//! Temporary files in a query's sink that failed, cancelled or killed task
//! attempts left behind (`.part-<batch>-...tmp`, and `...tmp#N` for an
//! unfinished upload). An executor removes its own when an attempt fails or
//! is cancelled; a killed executor cannot, so the driver removes:
//!
//! - at recovery, those of batches up to the last committed one;
//! - after a commit, those of batches up to it, in the background, at most
//!   once every [`EVERY`] (a listing of the sink directory is not free);
//! - when the query finishes or is stopped, all of them.
//!
//! The files of a batch that is not committed are left alone while the
//! query runs: an attempt may still be writing them. A stopped query never
//! runs again, so the batches it planned and never committed are abandoned
//! when it stops: their part files are removed (see [`abandon_uncommitted`]).

use std::time::{Duration, Instant};

use sluice_common::checkpoint::{Log, QueryCheckpoint};
use sluice_common::sink::FileSink;
use tracing::{debug, info, warn};

/// The least time between two purges after commits.
pub const EVERY: Duration = Duration::from_secs(10);

/// Decides when a purge after a commit is due.
#[derive(Debug, Default)]
pub struct Cleaner {
    last: Option<Instant>,
}

impl Cleaner {
    /// Whether a purge is due at `now`; if so, it counts as done.
    pub fn due(&mut self, now: Instant) -> bool {
        let due = self.last.is_none_or(|l| now.duration_since(l) >= EVERY);
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// After the commit of batch `committed`: purges `files` up to it in the
/// background through `io`, if a purge is due.
pub fn after_commit(
    cleaner: &std::sync::Mutex<Cleaner>,
    io: &crate::sink::SinkIo,
    files: &FileSink,
    committed: u64,
) {
    let due = cleaner
        .lock()
        .expect("the cleaner's lock is never poisoned: nothing panics holding it")
        .due(Instant::now());
    if due {
        io.spawn(purge(files.clone(), Some(committed)));
    }
}

/// Purges now; a failure is logged and left for the next purge.
pub async fn purge(sink: FileSink, upto: Option<u64>) {
    match sink.purge_temp(upto).await {
        Ok(0) => {}
        Ok(n) => debug!(removed = n, upto, "temporary sink files removed"),
        Err(e) => warn!(error = %e, upto, "cannot remove temporary sink files; will try again"),
    }
}

/// After a query stopped for good: abandons each batch it planned and
/// never committed (`offsets/N` without `commits/N`), removing its part
/// files unless the batch's sink manifest was written first (see
/// [`FileSink::abandon`]). A failure is logged: those files are in no
/// manifest, so readers never see them.
pub async fn abandon_uncommitted(sink: FileSink, qc: QueryCheckpoint, epoch: u64) {
    let abandoned = async {
        let Some(planned) = qc.latest(Log::Offsets).await? else {
            return Ok(None);
        };
        let first = qc.latest(Log::Commits).await?.map_or(0, |c| c + 1);
        let mut removed = 0;
        for batch in first..=planned {
            removed += sink.abandon(batch, epoch).await?;
        }
        Ok::<_, sluice_common::Error>(Some((first, planned, removed)))
    };
    match abandoned.await {
        Ok(Some((first, last, removed))) if first <= last => {
            info!(
                first,
                last, removed, "uncommitted batches of the stopped query abandoned"
            );
        }
        Ok(_) => {}
        Err(e) => warn!(
            error = %e,
            "cannot abandon the stopped query's uncommitted batches; their part files stay, in no manifest"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purges_after_commits_are_spaced() {
        let t0 = Instant::now();
        let mut c = Cleaner::default();
        assert!(c.due(t0), "the first commit purges");
        assert!(!c.due(t0 + Duration::from_secs(9)));
        assert!(c.due(t0 + EVERY));
        assert!(!c.due(t0 + EVERY + Duration::from_secs(1)));
    }
}
