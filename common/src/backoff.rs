//! The one retry schedule: a first delay that doubles with every step, up
//! to a cap. The driver, the executor and the CLI each pick their own first
//! delay and cap.

use std::time::Duration;

/// `first * 2^step`, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Backoff { first, cap }
    }

    /// The delay before retry number `step` (0-based).
    pub fn delay(&self, step: u32) -> Duration {
        let factor = 1u32.checked_shl(step).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let ms: Vec<u128> = (0..8).map(|s| b.delay(s).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
    }
}
