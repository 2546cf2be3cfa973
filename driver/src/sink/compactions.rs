//! When a table sink's background compaction runs: after every
//! `compact.every_batches` batches, one at a time (a turn that comes while
//! one runs is skipped; the next one picks up its files).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A table sink's compactions.
pub struct Compactions {
    every: Option<u64>,
    running: Arc<AtomicBool>,
}

/// A compaction's turn: the next one may start once it is dropped.
pub struct Turn(Arc<AtomicBool>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Compactions {
    /// Compactions after every `every` batches; none without it.
    pub fn new(every: Option<u64>) -> Self {
        Compactions {
            every,
            running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// After batch `committed`: the turn of a compaction, if one is due and
    /// none runs.
    pub fn due(&self, committed: u64) -> Option<Turn> {
        let due = self
            .every
            .is_some_and(|every| (committed + 1).is_multiple_of(every));
        (due && !self.running.swap(true, Ordering::AcqRel)).then(|| Turn(self.running.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compaction_is_due_every_n_batches_and_one_runs_at_a_time() {
        let c = Compactions::new(Some(5));
        assert!(c.due(3).is_none());
        let turn = c.due(4).expect("after the fifth batch");
        assert!(c.due(9).is_none(), "one runs already");
        drop(turn);
        assert!(c.due(9).is_some());
        assert!(Compactions::new(None).due(4).is_none());
    }
}
