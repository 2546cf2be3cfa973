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
//!
//! A query with several inputs keeps one clock per watermarked input; the
//! query's watermark is their minimum (none until each has one), so no
//! input's rows are dropped or its state evicted before its own watermark
//! passes them.

use std::collections::BTreeMap;

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

/// The clock of each watermarked input, by table, with its delay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clocks {
    pub inputs: BTreeMap<String, (u64, EventClock)>,
}

/// The watermarks of the next batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NextWatermarks {
    /// The query's: the minimum of the inputs'.
    pub query: Option<i64>,
    /// Each input's that has one.
    pub inputs: BTreeMap<String, i64>,
}

impl Clocks {
    /// The watermarks of the next batch.
    pub fn next(&self) -> NextWatermarks {
        let inputs: BTreeMap<String, i64> = self
            .inputs
            .iter()
            .filter_map(|(n, (delay, c))| Some((n.clone(), c.next_watermark(*delay)?)))
            .collect();
        let all = !self.inputs.is_empty() && inputs.len() == self.inputs.len();
        NextWatermarks {
            query: all.then(|| inputs.values().copied().min()).flatten(),
            inputs,
        }
    }

    /// The clocks after a batch commits whose watermarks were `planned`
    /// and whose inputs' latest event times were `seen`.
    pub fn after(mut self, planned: &BTreeMap<String, i64>, seen: &BTreeMap<String, i64>) -> Self {
        for (name, (_, clock)) in &mut self.inputs {
            *clock = clock.after(planned.get(name).copied(), seen.get(name).copied());
        }
        self
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

    #[test]
    fn the_query_watermark_is_the_least_input_watermark_once_each_has_one() {
        let mut c = Clocks::default();
        c.inputs.insert("a".into(), (1000, EventClock::default()));
        c.inputs.insert("b".into(), (0, EventClock::default()));
        assert_eq!(c.next(), NextWatermarks::default());
        let seen = BTreeMap::from([("a".to_string(), 10_000)]);
        let c = c.after(&BTreeMap::new(), &seen);
        let next = c.next();
        assert_eq!(next.query, None, "b has seen no event time yet");
        assert_eq!(next.inputs, BTreeMap::from([("a".to_string(), 9_000)]));
        let seen = BTreeMap::from([("b".to_string(), 5_000)]);
        let c = c.after(&next.inputs, &seen);
        assert_eq!(c.next().query, Some(5_000));
        let seen = BTreeMap::from([("b".to_string(), 50_000)]);
        let planned = c.next().inputs;
        let c = c.after(&planned, &seen);
        assert_eq!(c.next().query, Some(9_000), "a now holds the query back");
    }
}
