//! A count shared between a task and the parts of it that run elsewhere
//! (rows read, records skipped).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A shared, growing count.
#[derive(Debug, Default, Clone)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::AcqRel);
    }
}
