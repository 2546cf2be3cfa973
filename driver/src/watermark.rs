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

/// The watermark of the batch that ends a query whose inputs have all
/// ended (see [`Clocks::at_end`]).
pub const END_OF_TIME: i64 = i64::MAX;

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

    /// The watermarks of a query's last batch, once every input has ended:
    /// each input's at the end of time (the largest bigint, as Flink's
    /// final watermark), so that every stateful operator lets go of what
    /// it holds and emits what it would have emitted later: the last
    /// windows of an append-mode aggregation, an outer join's unmatched
    /// rows. `None` for a query without watermarks, and once that batch
    /// has been planned.
    pub fn at_end(&self) -> Option<NextWatermarks> {
        let done = |c: &EventClock| c.watermark == Some(END_OF_TIME);
        if self.inputs.is_empty() || self.inputs.values().all(|(_, c)| done(c)) {
            return None;
        }
        Some(NextWatermarks {
            query: Some(END_OF_TIME),
            inputs: self
                .inputs
                .keys()
                .map(|n| (n.clone(), END_OF_TIME))
                .collect(),
        })
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

    #[test]
    fn the_end_of_every_input_moves_every_watermark_to_the_end_once() {
        assert_eq!(
            Clocks::default().at_end(),
            None,
            "no watermark, nothing held"
        );
        let mut c = Clocks::default();
        c.inputs.insert("a".into(), (1000, EventClock::default()));
        c.inputs.insert("b".into(), (0, EventClock::default()));
        let seen = BTreeMap::from([("a".to_string(), 10_000)]);
        let c = c.after(&BTreeMap::new(), &seen);
        let end = c.at_end().expect("the last batch is due");
        assert_eq!(end.query, Some(END_OF_TIME));
        assert_eq!(end.inputs.len(), 2, "every input's, seen event time or not");
        let c = c.after(&end.inputs, &BTreeMap::new());
        assert_eq!(c.at_end(), None, "planned once");
        assert_eq!(c.next().query, Some(END_OF_TIME), "and never moves back");
    }
}
