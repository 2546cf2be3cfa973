//! The memory tier of the local state: a partition's state as a sorted map
//! in memory, for as long as the executor's states in memory fit their
//! budget (half of `--state-memory-bytes`, see [`super`]).
//!
//! A partition starts here and moves to the LSM store the first time a
//! write or a load would take the budget past its limit; it never moves
//! back. So a state that fits in memory costs a map's reads and writes,
//! and one that does not costs the store's, as before.
//!
//! A snapshot ([`Memory::frozen`]) shares the map; the next write after it
//! copies the map's nodes (not its keys and values, which are shared) while
//! the snapshot is alive.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Stored;

/// The sorted map of one partition's pairs.
pub type Map = BTreeMap<Stored, Stored>;

/// Bytes counted for each pair beyond its key and value: its share of the
/// map's nodes (two 24-byte slices, in nodes about two thirds full), and
/// the allocations of slices too long to be inline.
const PAIR_OVERHEAD: u64 = 96;

/// The bytes a pair is counted as.
fn cost(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64 + PAIR_OVERHEAD
}

/// The pairs a write replaced or removed: how many, and the bytes of
/// their keys and values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replaced {
    pub pairs: u64,
    pub bytes: u64,
}

/// Keys at most this long are held inline, with no allocation of their
/// own (a `fjall::Slice`'s inline size).
const INLINE_KEY: usize = 20;

/// Puts `value` as `key`'s: its old value, if any. An inline key costs
/// one descent of the map either way; a longer one is looked up first, so
/// that replacing its value allocates no key.
fn put(map: &mut Map, key: &[u8], value: &[u8]) -> Option<Stored> {
    if key.len() > INLINE_KEY
        && let Some(held) = map.get_mut(key)
    {
        return Some(std::mem::replace(held, Stored::from(value)));
    }
    match map.entry(Stored::from(key)) {
        Entry::Occupied(mut held) => Some(held.insert(Stored::from(value))),
        Entry::Vacant(room) => {
            room.insert(Stored::from(value));
            None
        }
    }
}

/// The bytes all memory tiers of one executor may hold.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    pub fn new(limit: u64) -> Self {
        Budget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` of the budget when they fit in it.
    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        // Invariant: a tier gives back only what it took.
        assert!(before >= bytes, "state memory budget given back twice");
    }

    /// The bytes taken now.
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// One partition's pairs in memory, counted against a [`Budget`].
#[derive(Debug)]
pub struct Memory {
    map: Arc<Map>,
    /// The bytes taken from the budget: the cost of every pair held.
    bytes: u64,
    budget: Arc<Budget>,
}

impl Drop for Memory {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

impl Memory {
    pub fn new(budget: Arc<Budget>) -> Self {
        Memory {
            map: Default::default(),
            bytes: 0,
            budget,
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<Stored> {
        self.map.get(key).cloned()
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    /// Writes puts (`Some`) and deletes (`None`), in order, when the
    /// budget takes what the puts may add: the pairs they replaced or
    /// removed. Otherwise writes nothing and returns `None`. Each pair
    /// costs one descent of the map.
    pub fn write(&mut self, changes: &[(&[u8], Option<&[u8]>)]) -> Option<Replaced> {
        let growth: u64 = changes
            .iter()
            .filter_map(|(k, v)| v.map(|v| cost(k, v)))
            .sum();
        if !self.budget.take(growth) {
            return None;
        }
        let map = Arc::make_mut(&mut self.map);
        let mut replaced = Replaced::default();
        for &(key, value) in changes {
            let old = match value {
                Some(v) => put(map, key, v),
                None => map.remove(key),
            };
            if let Some(old) = old {
                replaced.pairs += 1;
                replaced.bytes += (key.len() + old.len()) as u64;
            }
        }
        // What the old pairs cost (see [`cost`]).
        let freed = replaced.bytes + replaced.pairs * PAIR_OVERHEAD;
        self.bytes = self.bytes + growth - freed;
        self.budget.give(freed);
        Some(replaced)
    }

    /// Adds a pair whose key is above every key held (a load in key
    /// order), when the budget takes it; otherwise adds nothing and
    /// returns false.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> bool {
        debug_assert!(
            self.map.last_key_value().is_none_or(|(k, _)| &k[..] < key),
            "a load out of key order"
        );
        let c = cost(key, value);
        if !self.budget.take(c) {
            return false;
        }
        Arc::make_mut(&mut self.map).insert(Stored::from(key), Stored::from(value));
        self.bytes += c;
        true
    }

    /// The pairs as they are now, shared with the tier until it changes.
    pub fn frozen(&self) -> Arc<Map> {
        self.map.clone()
    }

    /// Empties the tier, giving its bytes back: its pairs, in key order.
    pub fn take(&mut self) -> Arc<Map> {
        self.budget.give(std::mem::take(&mut self.bytes));
        std::mem::take(&mut self.map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_count_against_the_budget_and_drop_gives_it_back() {
        let budget = Arc::new(Budget::new(1000));
        let mut m = Memory::new(budget.clone());
        let none = Replaced::default();
        let written = m.write(&[(b"a", Some(b"12345")), (b"b", Some(b"1"))]);
        assert_eq!(written, Some(none));
        assert_eq!(budget.used(), cost(b"a", b"12345") + cost(b"b", b"1"));
        // A replace counts the new value, a delete frees its pair; both
        // report the pair they replaced.
        let written = m.write(&[(b"a", Some(b"1")), (b"b", None), (b"c", None)]);
        assert_eq!(
            written,
            Some(Replaced {
                pairs: 2,
                bytes: 6 + 2
            })
        );
        assert_eq!(budget.used(), cost(b"a", b"1"));
        assert_eq!(m.get(b"a").as_deref(), Some(&b"1"[..]));
        assert!(!m.contains(b"b"));
        drop(m);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_key_longer_than_inline_is_replaced_and_removed_like_a_short_one() {
        let budget = Arc::new(Budget::new(1 << 20));
        let mut m = Memory::new(budget.clone());
        let long = [7u8; INLINE_KEY + 9];
        assert_eq!(m.write(&[(&long, Some(b"old"))]), Some(Replaced::default()));
        let written = m.write(&[(&long, Some(b"newer"))]);
        assert_eq!(
            written,
            Some(Replaced {
                pairs: 1,
                bytes: long.len() as u64 + 3
            })
        );
        assert_eq!(m.get(&long).as_deref(), Some(&b"newer"[..]));
        assert_eq!(budget.used(), cost(&long, b"newer"));
        assert_eq!(m.write(&[(&long, None)]).map(|r| r.pairs), Some(1));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_write_past_the_budget_writes_nothing() {
        let budget = Arc::new(Budget::new(2 * PAIR_OVERHEAD + 4));
        let mut m = Memory::new(budget.clone());
        assert!(m.push(b"a", b"1"));
        assert_eq!(m.write(&[(b"b", Some(b"1")), (b"c", Some(b"1"))]), None);
        assert!(!m.contains(b"b"));
        assert_eq!(budget.used(), cost(b"a", b"1"));
        let pairs = m.take();
        assert_eq!(pairs.len(), 1);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_frozen_map_keeps_its_pairs_while_the_tier_changes() {
        let mut m = Memory::new(Arc::new(Budget::new(1 << 20)));
        assert!(m.write(&[(b"a", Some(b"1"))]).is_some());
        let frozen = m.frozen();
        assert!(m.write(&[(b"a", None), (b"b", Some(b"2"))]).is_some());
        assert_eq!(frozen.keys().map(|k| &k[..]).collect::<Vec<_>>(), [b"a"]);
        assert_eq!(
            m.frozen().keys().map(|k| &k[..]).collect::<Vec<_>>(),
            [b"b"]
        );
    }
}
