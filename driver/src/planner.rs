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
    let mut end = limit;
    if let Some(cap) = input.max_rows_per_batch {
        end = end.min(input.committed_end.saturating_add(cap.max(1)));
    }
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
        }
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
