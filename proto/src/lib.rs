//! Generated gRPC types and services for Sluice (`sluice.v1`).
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("sluice.v1");

/// The encoded file descriptor set, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("sluice_descriptor");

mod hint;
pub use hint::{LEADER_METADATA_KEY, leader_hint, set_leader_hint};

/// A query state as users see it: `RUNNING`, `FINISHED`, `STOPPED`,
/// `FAILED` (or `UNSPECIFIED` for a value this build does not know).
pub fn state_name(state: i32) -> &'static str {
    match QueryState::try_from(state) {
        Ok(QueryState::Running) => "RUNNING",
        Ok(QueryState::Finished) => "FINISHED",
        Ok(QueryState::Stopped) => "STOPPED",
        Ok(QueryState::Failed) => "FAILED",
        Ok(QueryState::Unspecified) | Err(_) => "UNSPECIFIED",
    }
}

impl TaskAssignment {
    /// Whether the task is a stateful operator's reduce task, which works
    /// on one state partition (and goes where that state is held).
    pub fn is_reduce(&self) -> bool {
        self.state().is_some()
    }

    /// A reduce task's state partition: its operator's work on it.
    pub fn state(&self) -> Option<&StateWork> {
        use task_assignment::Work;
        match self.work.as_ref()? {
            Work::Aggregate(w) => w.state.as_ref(),
            Work::Dedup(w) => w.state.as_ref(),
            Work::Join(w) => w.state.as_ref(),
            Work::TopN(w) => w.state.as_ref(),
            Work::Map(_) | Work::ShuffleMap(_) => None,
        }
    }
}
