//! The watermark: how far event time has certainly advanced, a pure
//! function of what committed batches saw.
//!
//! ```text
//!  batch N-1 commits with max_event_time (every batch up to N-1)
//!  offsets/N.watermark = max(watermark of N-1, max_event_time - delay)
//! ```
//!
//! Invariant: the watermark never moves back, and batch N's depends only
//! on batches before N, so a replay of N (which reads `offsets/N`) uses
//! the same one.

/// What the committed batches say of event time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventClock {
    /// The watermark of the last planned batch.
    pub watermark: Option<i64>,
    /// The latest event time of every committed batch.
    pub max_event: Option<i64>,
}

impl EventClock {
    /// The watermark of the next batch.
    pub fn next_watermark(&self, delay_ms: u64) -> Option<i64> {
        let trailing = self
            .max_event
            .map(|m| m.saturating_sub(i64::try_from(delay_ms).unwrap_or(i64::MAX)));
        self.watermark.max(trailing)
    }

    /// The clock after a batch with watermark `watermark` whose input's
    /// latest event time was `seen` commits.
    pub fn after(self, watermark: Option<i64>, seen: Option<i64>) -> Self {
        EventClock {
            watermark: self.watermark.max(watermark),
            max_event: self.max_event.max(seen),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_trails_the_latest_event_and_never_moves_back() {
        let c = EventClock::default();
        assert_eq!(c.next_watermark(5000), None, "no event time seen yet");
        let c = c.after(None, Some(20_000));
        assert_eq!(c.next_watermark(5000), Some(15_000));
        let c = c.after(Some(15_000), Some(12_000));
        assert_eq!(c.next_watermark(5000), Some(15_000), "an older batch");
        let c = c.after(Some(15_000), None);
        assert_eq!(c.next_watermark(5000), Some(15_000), "an empty batch");
        let c = c.after(Some(15_000), Some(31_000));
        assert_eq!(c.next_watermark(0), Some(31_000));
    }
}
