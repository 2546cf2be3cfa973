//! One query as the leader sees it: its identity, its spec, its state (only
//! changed through [`QueryState::can_become`]), and its recent progress.

use std::collections::VecDeque;
use std::sync::Mutex;

use sluice_common::spec::QuerySpec;
use sluice_proto as pb;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::lifecycle::QueryState;

/// Progress entries kept per query for `sluice progress`.
const PROGRESS_HISTORY: usize = 100;

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
    view: watch::Sender<QueryView>,
    history: Mutex<VecDeque<pb::BatchProgress>>,
    progress: broadcast::Sender<pb::BatchProgress>,
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
            view: watch::Sender::new(view),
            history: Mutex::new(VecDeque::new()),
            progress: broadcast::channel(256).0,
        }
    }

    pub fn view(&self) -> QueryView {
        self.view.borrow().clone()
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
            v.error = error;
            true
        });
    }

    /// Records where recovery found the query.
    pub fn set_committed(&self, batch: i64, rows: u64) {
        self.view.send_modify(|v| {
            v.last_committed_batch = batch;
            v.committed_rows = rows;
        });
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

    /// Records a committed batch.
    pub fn record(&self, progress: pb::BatchProgress, committed_rows: u64) {
        self.view.send_modify(|v| {
            v.last_committed_batch = progress.batch_id as i64;
            v.committed_rows = committed_rows;
            v.error.clear();
        });
        let mut h = self.history();
        if h.len() == PROGRESS_HISTORY {
            h.pop_front();
        }
        h.push_back(progress.clone());
        drop(h);
        let _ = self.progress.send(progress);
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
        }
    }
}
