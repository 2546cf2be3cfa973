//! The query lifecycle as an explicit state machine. Every legal transition
//! is listed in [`QueryState::can_become`]; nothing else changes a state.
//!
//! ```text
//!              ┌──────────► FINISHED   (last row committed)
//!   RUNNING ───┼──────────► STOPPED    (user stop; `stopped` marker written)
//!              └──────────► FAILED ───► STOPPED   (a failed query can be stopped,
//!                                                    so no new term retries it)
//! ```
//!
//! FINISHED, STOPPED and FAILED are terminal. A new leader re-derives every
//! state from the checkpoint: `stopped` stays STOPPED, `failed` stays FAILED
//! (with its error), a fully committed bounded query is FINISHED again, and
//! anything else is RUNNING. A FAILED query runs again only when it is
//! resubmitted with the same spec, which removes `failed` and starts a new
//! entry from the checkpoint.

use sluice_proto as pb;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueryState {
    Running,
    Finished,
    Stopped,
    Failed,
}

impl QueryState {
    /// The legal transitions, in one place.
    pub fn can_become(self, next: QueryState) -> bool {
        use QueryState::*;
        matches!(
            (self, next),
            (Running, Finished) | (Running, Stopped) | (Running, Failed) | (Failed, Stopped)
        )
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, QueryState::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueryState::Running => "RUNNING",
            QueryState::Finished => "FINISHED",
            QueryState::Stopped => "STOPPED",
            QueryState::Failed => "FAILED",
        }
    }

    pub fn to_proto(self) -> pb::QueryState {
        match self {
            QueryState::Running => pb::QueryState::Running,
            QueryState::Finished => pb::QueryState::Finished,
            QueryState::Stopped => pb::QueryState::Stopped,
            QueryState::Failed => pb::QueryState::Failed,
        }
    }

    pub const ALL: [QueryState; 4] = [
        QueryState::Running,
        QueryState::Finished,
        QueryState::Stopped,
        QueryState::Failed,
    ];
}

#[cfg(test)]
mod tests {
    use super::QueryState::*;

    #[test]
    fn only_running_moves() {
        for from in super::QueryState::ALL {
            for to in super::QueryState::ALL {
                let legal = (from == Running && to != Running) || (from == Failed && to == Stopped);
                assert_eq!(from.can_become(to), legal, "{from:?} -> {to:?}");
            }
        }
        assert!(!Running.is_terminal());
        assert!(Failed.is_terminal());
    }
}
