//! The batch planner: a pure function from what is committed and what the
//! source has available to the next batch's input range.

/// What the planner knows about one query right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanInput {
    /// Values `0..committed_end` are committed.
    pub committed_end: u64,
    /// Values `0..available` are available in the source now.
    pub available: u64,
    pub max_rows_per_batch: Option<u64>,
    pub total_rows: Option<u64>,
    /// The driver's cap on one task's rows (`--max-rows-per-task`).
    pub max_rows_per_task: u64,
    /// The source's partitions: one task each.
    pub partitions: u32,
}

impl PlanInput {
    /// The most rows one batch may hold: the spec's `max_rows_per_batch`,
    /// and at most `max_rows_per_task` rows in each partition's task,
    /// whatever the spec says.
    pub fn batch_cap(&self) -> u64 {
        let per_tasks = self
            .max_rows_per_task
            .max(1)
            .saturating_mul(u64::from(self.partitions.max(1)));
        self.max_rows_per_batch
            .map_or(per_tasks, |cap| cap.max(1).min(per_tasks))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanDecision {
    /// Every row of a bounded source is committed.
    Finished,
    /// Nothing new is available yet.
    Wait,
    /// Run a batch over the values `[start, end)`.
    Batch { start: u64, end: u64 },
}

/// Decides the next batch.
pub fn plan(input: PlanInput) -> PlanDecision {
    let limit = input
        .total_rows
        .map_or(input.available, |t| input.available.min(t));
    if input.total_rows.is_some_and(|t| input.committed_end >= t) {
        return PlanDecision::Finished;
    }
    if limit <= input.committed_end {
        return PlanDecision::Wait;
    }
    let end = limit.min(input.committed_end.saturating_add(input.batch_cap()));
    PlanDecision::Batch {
        start: input.committed_end,
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(committed_end: u64, available: u64) -> PlanInput {
        PlanInput {
            committed_end,
            available,
            max_rows_per_batch: None,
            total_rows: None,
            max_rows_per_task: u64::MAX,
            partitions: 1,
        }
    }

    #[test]
    fn the_task_cap_bounds_every_batch_whatever_the_spec_says() {
        // 1024 partitions at 10^12 rows/s: 8 * 10^9 rows available.
        let huge = PlanInput {
            max_rows_per_task: 1_000_000,
            partitions: 1024,
            ..input(0, 8_000_000_000)
        };
        assert_eq!(
            plan(huge),
            PlanDecision::Batch {
                start: 0,
                end: 1_024_000_000
            }
        );
        let tighter_spec = PlanInput {
            max_rows_per_batch: Some(10),
            ..huge
        };
        assert_eq!(
            plan(tighter_spec),
            PlanDecision::Batch { start: 0, end: 10 }
        );
        let looser_spec = PlanInput {
            max_rows_per_batch: Some(u64::MAX),
            max_rows_per_task: 7,
            partitions: 3,
            ..input(5, 1000)
        };
        assert_eq!(plan(looser_spec), PlanDecision::Batch { start: 5, end: 26 });
        // A batch at the cap gives no partition more than the task cap.
        let per_partition = |p: u64, start: u64, end: u64, n: u64| {
            (start..end).filter(|v| v % n == p).count() as u64
        };
        assert!((0..3).all(|p| per_partition(p, 5, 26, 3) <= 7));
    }

    #[test]
    fn takes_everything_available() {
        assert_eq!(
            plan(input(0, 100)),
            PlanDecision::Batch { start: 0, end: 100 }
        );
        assert_eq!(
            plan(input(100, 250)),
            PlanDecision::Batch {
                start: 100,
                end: 250
            }
        );
    }

    #[test]
    fn waits_when_nothing_is_new() {
        assert_eq!(plan(input(100, 100)), PlanDecision::Wait);
        assert_eq!(plan(input(0, 0)), PlanDecision::Wait);
    }

    #[test]
    fn caps_rows_per_batch() {
        let i = PlanInput {
            max_rows_per_batch: Some(30),
            ..input(10, 1000)
        };
        assert_eq!(plan(i), PlanDecision::Batch { start: 10, end: 40 });
    }

    #[test]
    fn bounded_sources_finish_exactly_at_total() {
        let i = PlanInput {
            total_rows: Some(50),
            ..input(40, 1000)
        };
        assert_eq!(plan(i), PlanDecision::Batch { start: 40, end: 50 });
        let i = PlanInput {
            total_rows: Some(50),
            ..input(50, 1000)
        };
        assert_eq!(plan(i), PlanDecision::Finished);
    }
}
