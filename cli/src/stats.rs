//! Summary statistics for `bench`: percentiles (linear interpolation between
//! closest ranks, as numpy's default), mean, min and max. Pure functions.

use serde_json::{Value, json};

/// The `p`-th percentile (0..=100) of `sorted` (ascending), or `None` when
/// it is empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p.clamp(0.0, 100.0) / 100.0) * last as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// Count, min, mean, median, p99 and max of a sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub mean: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summarizes `values` (any order); `None` when empty.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len();
        Some(Summary {
            count,
            min: *sorted.first()?,
            mean: sorted.iter().sum::<f64>() / count as f64,
            median: percentile(&sorted, 50.0)?,
            p99: percentile(&sorted, 99.0)?,
            max: *sorted.last()?,
        })
    }

    /// `{"count", "min", "mean", "median", "p99", "max"}`, rounded to µs.
    pub fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "min": round3(self.min),
            "mean": round3(self.mean),
            "median": round3(self.median),
            "p99": round3(self.p99),
            "max": round3(self.max),
        })
    }
}

/// Rounds to three decimals.
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 100.0), Some(3.0));
        let hundred: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 99.0), Some(100.0));
    }

    #[test]
    fn summaries() {
        assert_eq!(Summary::of(&[]), None);
        let s = Summary::of(&[5.0, 1.0, 3.0, f64::NAN]).unwrap();
        assert_eq!((s.count, s.min, s.median, s.max), (3, 1.0, 3.0, 5.0));
        assert_eq!(s.mean, 3.0);
        assert!((s.p99 - 4.96).abs() < 1e-9);
        assert_eq!(s.to_json()["p99"], 4.96);
        assert_eq!(round3(1.23456), 1.235);
    }
}
