//! The INFO-level summary of a running query: at most one line per query
//! every [`SUMMARY_EVERY`], however fast its batches go (one line per batch
//! at trigger 0 would fill a disk), plus one when the query ends. Per-batch
//! lines are DEBUG. Pure: the runner passes the clock in.

use std::time::{Duration, Instant};

/// The least time between two summaries of one query.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What happened since the last summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub batches: u64,
    pub rows: u64,
    pub last_batch: u64,
    /// Rows committed since the query (re)started in this term.
    pub rows_total: u64,
    pub rows_per_second: f64,
}

/// Counts committed batches and says when a summary is due.
#[derive(Debug)]
pub struct Summarizer {
    since: Instant,
    batches: u64,
    rows: u64,
    rows_total: u64,
    last_batch: Option<u64>,
}

impl Summarizer {
    pub fn new(now: Instant) -> Self {
        Summarizer {
            since: now,
            batches: 0,
            rows: 0,
            rows_total: 0,
            last_batch: None,
        }
    }

    /// Records a committed batch; returns a summary once
    /// [`SUMMARY_EVERY`] has passed since the last one.
    pub fn committed(&mut self, now: Instant, batch: u64, rows: u64) -> Option<Summary> {
        self.batches += 1;
        self.rows += rows;
        self.rows_total += rows;
        self.last_batch = Some(batch);
        (now.duration_since(self.since) >= SUMMARY_EVERY).then(|| self.take(now))
    }

    /// The summary of what is not reported yet, if anything, for the end.
    pub fn finish(&mut self, now: Instant) -> Option<Summary> {
        (self.batches > 0).then(|| self.take(now))
    }

    fn take(&mut self, now: Instant) -> Summary {
        let secs = now.duration_since(self.since).as_secs_f64().max(1e-3);
        let summary = Summary {
            batches: self.batches,
            rows: self.rows,
            last_batch: self.last_batch.unwrap_or_default(),
            rows_total: self.rows_total,
            rows_per_second: self.rows as f64 / secs,
        };
        self.since = now;
        self.batches = 0;
        self.rows = 0;
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_summary_per_period_however_many_batches() {
        let t0 = Instant::now();
        let mut s = Summarizer::new(t0);
        let ms = |n| t0 + Duration::from_millis(n);
        // 1000 batches in under 10 s: no summary.
        for b in 0..1000 {
            assert_eq!(s.committed(ms(b * 9), b, 10), None);
        }
        let first = s.committed(ms(10_000), 1000, 10).expect("due at 10 s");
        assert_eq!(
            (first.batches, first.rows, first.last_batch),
            (1001, 10_010, 1000)
        );
        assert!((first.rows_per_second - 1001.0).abs() < 1e-6);
        // The next period starts at the summary.
        assert_eq!(s.committed(ms(19_999), 1001, 5), None);
        let end = s.finish(ms(20_000)).expect("a final summary");
        assert_eq!((end.batches, end.rows, end.rows_total), (1, 5, 10_015));
        assert_eq!(s.finish(ms(20_001)), None, "nothing left to report");
    }
}
