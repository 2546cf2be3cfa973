//! The recovery decision: a pure function from the latest `offsets/N` and
//! the latest `commits/M` of a query to what its runner does first.
//!
//! ```text
//!   offsets  commits   decision
//!   none     none      start at batch 0
//!   N        M = N     plan batch N+1
//!   N        M = N-1   re-run batch N from offsets/N  (or N = 0, no commit)
//!   anything else      damaged: fail this query, naming the files
//! ```

use sluice_common::checkpoint::Log::{Commits, Offsets};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// No batch was ever planned.
    Fresh,
    /// Batch N committed; plan N+1.
    Next { committed: u64 },
    /// Batch N was planned but not committed; replay it from `offsets/N`.
    Rerun { batch: u64 },
    /// The logs disagree in a way no crash can produce.
    Damaged { reason: String },
}

pub fn decide(latest_offsets: Option<u64>, latest_commit: Option<u64>) -> Recovery {
    match (latest_offsets, latest_commit) {
        (None, None) => Recovery::Fresh,
        (Some(n), Some(m)) if m == n => Recovery::Next { committed: n },
        (Some(n), Some(m)) if m + 1 == n => Recovery::Rerun { batch: n },
        (Some(0), None) => Recovery::Rerun { batch: 0 },
        (None, Some(m)) => Recovery::Damaged {
            reason: format!("{} exists but {} is empty", Commits.entry(m), Offsets),
        },
        (Some(n), None) => Recovery::Damaged {
            reason: format!(
                "{} is the latest plan but {} is empty",
                Offsets.entry(n),
                Commits
            ),
        },
        (Some(n), Some(m)) => Recovery::Damaged {
            reason: format!(
                "latest plan {} and latest commit {} are not adjacent",
                Offsets.entry(n),
                Commits.entry(m)
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crash_point_recovers() {
        assert_eq!(decide(None, None), Recovery::Fresh);
        assert_eq!(decide(Some(0), None), Recovery::Rerun { batch: 0 });
        assert_eq!(decide(Some(0), Some(0)), Recovery::Next { committed: 0 });
        assert_eq!(decide(Some(7), Some(6)), Recovery::Rerun { batch: 7 });
        assert_eq!(decide(Some(7), Some(7)), Recovery::Next { committed: 7 });
    }

    #[test]
    fn impossible_logs_are_damage() {
        assert!(matches!(decide(Some(9), Some(6)), Recovery::Damaged { .. }));
        assert!(matches!(decide(Some(6), Some(9)), Recovery::Damaged { .. }));
        assert!(matches!(decide(None, Some(0)), Recovery::Damaged { .. }));
        assert!(matches!(decide(Some(3), None), Recovery::Damaged { .. }));
    }
}
