//! One query as the leader sees it: its identity, its spec, its state (only
//! changed through [`QueryState::can_become`]), and its recent progress.
//!
//! The progress history holds the last [`PROGRESS_RETAINED`] batches: those
//! this leader committed, after those read back from `progress/` (see
//! `history.rs`). Until that read is done, [`QueryEntry::restored`] waits.

use std::collections::VecDeque;
use std::sync::Mutex;

use sluice_common::checkpoint::PROGRESS_RETAINED;
use sluice_common::spec::QuerySpec;
use sluice_proto as pb;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::commit_gate::CommitGate;
use crate::lifecycle::QueryState;

/// The changing part of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryView {
    pub state: QueryState,
    pub last_committed_batch: i64,
    pub committed_rows: u64,
    pub error: String,
}

pub struct QueryEntry {
    pub id: String,
    pub name: String,
    /// `None` when the checkpoint's spec could not be read.
    pub spec: Option<QuerySpec>,
    pub epoch: u64,
    /// Cancelled when the query stops or the term ends.
    pub stop: CancellationToken,
    /// Whether a batch commit is under way, which a stop lets finish.
    pub commits: CommitGate,
    view: watch::Sender<QueryView>,
    history: Mutex<VecDeque<pb::BatchProgress>>,
    progress: broadcast::Sender<pb::BatchProgress>,
    /// True once the stored history is in `history`.
    restored: watch::Sender<bool>,
    /// True while a runner of this entry runs, its cleanup after a stop
    /// included.
    running: watch::Sender<bool>,
    /// The last [`ERRORS_RETAINED`] errors this leader saw, oldest first.
    errors: Mutex<VecDeque<RecentError>>,
    /// The running batch's rebuild of the state after a rescale, and
    /// when it began.
    rebuilding: Mutex<Option<(pb::StateRebuilding, std::time::Instant)>>,
}

/// Errors a query keeps for the UI.
pub const ERRORS_RETAINED: usize = 20;

/// An error the query reported, and when (ms since the Unix epoch).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecentError {
    pub at_ms: i64,
    pub message: String,
}

impl QueryEntry {
    pub fn new(
        id: String,
        name: String,
        spec: Option<QuerySpec>,
        epoch: u64,
        state: QueryState,
        stop: CancellationToken,
    ) -> Self {
        let view = QueryView {
            state,
            last_committed_batch: -1,
            committed_rows: 0,
            error: String::new(),
        };
        QueryEntry {
            id,
            name,
            spec,
            epoch,
            stop,
            commits: CommitGate::default(),
            view: watch::Sender::new(view),
            history: Mutex::new(VecDeque::new()),
            progress: broadcast::channel(256).0,
            restored: watch::Sender::new(false),
            running: watch::Sender::new(false),
            errors: Mutex::new(VecDeque::new()),
            rebuilding: Mutex::new(None),
        }
    }

    pub fn view(&self) -> QueryView {
        self.view.borrow().clone()
    }

    /// The input rows of the committed batches.
    pub fn committed_rows(&self) -> u64 {
        self.view.borrow().committed_rows
    }

    pub fn state(&self) -> QueryState {
        self.view.borrow().state
    }

    pub fn watch(&self) -> watch::Receiver<QueryView> {
        self.view.subscribe()
    }

    /// Moves to `next` if the lifecycle allows it; returns whether it did.
    pub fn transition(&self, next: QueryState, error: Option<String>) -> bool {
        let mut moved = false;
        self.view.send_if_modified(|v| {
            if !v.state.can_become(next) {
                return false;
            }
            info!(query = %self.name, from = v.state.as_str(), to = next.as_str(), "query state");
            v.state = next;
            if let Some(e) = error {
                self.note_error(&e);
                v.error = e;
            }
            moved = true;
            true
        });
        moved
    }

    /// Sets (or clears, with an empty string) the error shown while running.
    pub fn set_error(&self, error: String) {
        self.view.send_if_modified(|v| {
            if v.error == error || v.state.is_terminal() {
                return false;
            }
            self.note_error(&error);
            v.error = error;
            true
        });
    }

    /// Keeps a non-empty error in the recent errors. A poisoned lock is a
    /// bug: panic.
    fn note_error(&self, message: &str) {
        if message.is_empty() {
            return;
        }
        let mut errors = self.errors.lock().expect("recent errors lock poisoned");
        if errors.len() == ERRORS_RETAINED {
            errors.pop_front();
        }
        errors.push_back(RecentError {
            at_ms: sluice_common::time::now_ms(),
            message: message.to_string(),
        });
    }

    /// The recent errors, oldest first.
    pub fn recent_errors(&self) -> Vec<RecentError> {
        let errors = self.errors.lock().expect("recent errors lock poisoned");
        errors.iter().cloned().collect()
    }

    /// Records where recovery found the query.
    pub fn set_committed(&self, batch: i64, rows: u64) {
        self.view.send_modify(|v| {
            v.last_committed_batch = batch;
            v.committed_rows = rows;
        });
    }

    /// Shows (`Some`) or clears (`None`) the running batch's rebuild of
    /// the state in the query's status. A poisoned lock is a bug: panic.
    pub fn set_rebuilding(&self, rebuilding: Option<pb::StateRebuilding>) {
        let mut r = self.rebuilding.lock().expect("rebuilding lock poisoned");
        *r = rebuilding.map(|r| (r, std::time::Instant::now()));
    }

    /// The running batch's rebuild of the state, with how long it has run.
    fn rebuilding(&self) -> Option<pb::StateRebuilding> {
        let r = self.rebuilding.lock().expect("rebuilding lock poisoned");
        r.as_ref().map(|(r, since)| pb::StateRebuilding {
            elapsed_ms: since.elapsed().as_millis() as u64,
            ..*r
        })
    }

    /// The recent progress. A poisoned lock is a bug: panic.
    fn history(&self) -> std::sync::MutexGuard<'_, VecDeque<pb::BatchProgress>> {
        self.history.lock().expect("progress history lock poisoned")
    }

    /// The retained progress of the batches after `batch`, oldest first.
    pub fn progress_after(&self, batch: Option<u64>) -> Vec<pb::BatchProgress> {
        self.history()
            .iter()
            .filter(|p| batch.is_none_or(|b| p.batch_id > b))
            .cloned()
            .collect()
    }

    /// The progress of the last batch recorded.
    pub fn last_progress(&self) -> Option<pb::BatchProgress> {
        self.history().back().cloned()
    }

    /// Records a committed batch.
    pub fn record(&self, progress: pb::BatchProgress, committed_rows: u64) {
        self.view.send_modify(|v| {
            v.last_committed_batch = progress.batch_id as i64;
            v.committed_rows = committed_rows;
            v.error.clear();
        });
        let mut h = self.history();
        if h.len() == PROGRESS_RETAINED {
            h.pop_front();
        }
        h.push_back(progress.clone());
        drop(h);
        let _ = self.progress.send(progress);
    }

    /// Puts the stored history before what this leader recorded: the
    /// records of batches older than the first recorded one, up to
    /// [`PROGRESS_RETAINED`] in all. `stored` is oldest first.
    pub fn restore(&self, stored: Vec<pb::BatchProgress>) {
        let mut h = self.history();
        let first_live = h.front().map(|p| p.batch_id);
        let older = stored
            .into_iter()
            .rev()
            .filter(|p| first_live.is_none_or(|f| p.batch_id < f));
        for p in older {
            if h.len() == PROGRESS_RETAINED {
                break;
            }
            h.push_front(p);
        }
        drop(h);
        self.restored.send_replace(true);
    }

    /// Marks whether a runner of this query runs.
    pub fn set_running(&self, running: bool) {
        self.running.send_replace(running);
    }

    /// Waits until no runner of this query runs, at most `limit`; whether
    /// none does.
    pub async fn runner_ended(&self, limit: std::time::Duration) -> bool {
        let mut rx = self.running.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let ended = rx.wait_for(|running| !*running);
        tokio::time::timeout(limit, ended).await.is_ok()
    }

    /// Waits until the stored history is restored.
    pub async fn restored(&self) {
        let mut rx = self.restored.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = rx.wait_for(|done| *done).await;
    }

    /// The recent progress and a subscription to what comes next.
    pub fn progress(
        &self,
    ) -> (
        Vec<pb::BatchProgress>,
        broadcast::Receiver<pb::BatchProgress>,
    ) {
        let rx = self.progress.subscribe();
        let past = self.history().iter().cloned().collect();
        (past, rx)
    }

    pub fn to_proto(&self) -> pb::QueryStatus {
        let v = self.view();
        let latest = self.history().back().cloned();
        pb::QueryStatus {
            id: self.id.clone(),
            name: self.name.clone(),
            state: v.state.to_proto() as i32,
            last_committed_batch: v.last_committed_batch,
            error: v.error,
            spec: self.spec.as_ref().map(pb::QuerySpec::from),
            epoch: self.epoch,
            committed_rows: v.committed_rows,
            latest_progress: latest,
            rebuilding: self.rebuilding(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> QueryEntry {
        QueryEntry::new(
            "id".into(),
            "q".into(),
            None,
            1,
            QueryState::Running,
            CancellationToken::new(),
        )
    }

    fn batch(id: u64) -> pb::BatchProgress {
        pb::BatchProgress {
            batch_id: id,
            ..Default::default()
        }
    }

    fn ids(e: &QueryEntry) -> Vec<u64> {
        e.progress_after(None).iter().map(|p| p.batch_id).collect()
    }

    #[test]
    fn the_stored_history_goes_before_what_was_recorded_since() {
        let e = entry();
        e.record(batch(5), 0);
        e.record(batch(6), 0);
        // The store has 5 too: the batch this leader re-recorded wins.
        e.restore((0..=5).map(batch).collect());
        assert_eq!(ids(&e), [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn the_history_is_capped_keeping_the_newest() {
        let e = entry();
        e.record(batch(2000), 0);
        e.restore((0..2000).map(batch).collect());
        let got = ids(&e);
        assert_eq!(got.len(), PROGRESS_RETAINED);
        assert_eq!(got.first(), Some(&1001));
        assert_eq!(got.last(), Some(&2000));
        e.record(batch(2001), 0);
        assert_eq!(ids(&e).first(), Some(&1002));
    }

    #[tokio::test]
    async fn a_restart_waits_for_the_runner_to_end() {
        let e = std::sync::Arc::new(entry());
        let short = std::time::Duration::from_millis(20);
        assert!(e.runner_ended(short).await, "no runner was started");
        e.set_running(true);
        assert!(!e.runner_ended(short).await, "the runner still runs");
        let ending = e.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            ending.set_running(false);
        });
        assert!(e.runner_ended(std::time::Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn restored_waits_for_the_stored_history() {
        let e = std::sync::Arc::new(entry());
        let waiting = tokio::spawn({
            let e = e.clone();
            async move { e.restored().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        e.restore(Vec::new());
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("restored() returns once restored")
            .unwrap();
    }
}
