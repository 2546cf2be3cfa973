//! Seeded randomness that a failing test can replay: the seed comes from
//! an environment variable or the clock, and is printed as `seed = N`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The variable that replays a test run.
pub const SEED_VAR: &str = "SLUICE_TEST_SEED";

/// The seed in `var`, else a fresh one; printed either way.
pub fn seed_from(var: &str) -> u64 {
    let seed = match std::env::var(var) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={s:?} is not an unsigned integer")),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
            .unwrap_or(1),
    };
    eprintln!("seed = {seed} (replay with {var}={seed})");
    seed
}

/// A generator seeded from `SLUICE_TEST_SEED` (or fresh), printed.
pub fn test_rng() -> Rng {
    Rng::new(seed_from(SEED_VAR))
}

/// SplitMix64: small, fast and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next_u64() % span,
            None => self.next_u64(),
        }
    }

    /// A duration between `lo_ms` and `hi_ms` milliseconds.
    pub fn millis(&mut self, lo_ms: u64, hi_ms: u64) -> Duration {
        Duration::from_millis(self.between(lo_ms, hi_ms))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / ((1u64 << 53) as f64) < p
    }

    /// A random element of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.between(0, items.len() as u64 - 1) as usize]
    }
}
