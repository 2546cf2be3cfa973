//! What [`super::table::StateTable::find`] read, kept until the next
//! change applies, so that applying it reads no key twice: the size of
//! each key's stored value, or that it has none.
//!
//! The keys lie end to end in one buffer, so remembering a batch's keys
//! costs no allocation per key.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use hashbrown::HashTable;

/// A remembered key: where it lies in the buffer, and its value's size.
#[derive(Debug, Clone, Copy)]
struct Entry {
    start: usize,
    len: usize,
    size: Option<usize>,
}

/// Value sizes by key.
#[derive(Default)]
pub struct Memo {
    keys: Vec<u8>,
    table: HashTable<Entry>,
    hasher: FixedState,
}

impl Memo {
    fn key<'a>(keys: &'a [u8], e: &Entry) -> &'a [u8] {
        &keys[e.start..e.start + e.len]
    }

    /// Remembers `key`'s value size (`None`: no value), replacing what
    /// was remembered of it.
    pub fn insert(&mut self, key: &[u8], size: Option<usize>) {
        let hash = self.hasher.hash_one(key);
        let Memo {
            keys,
            table,
            hasher,
        } = self;
        let found = table.find_mut(hash, |e| Self::key(keys, e) == key);
        if let Some(e) = found {
            e.size = size;
            return;
        }
        let e = Entry {
            start: keys.len(),
            len: key.len(),
            size,
        };
        keys.extend_from_slice(key);
        table.insert_unique(hash, e, |e| hasher.hash_one(Self::key(keys, e)));
    }

    /// What was remembered of `key`: `Some(size)`, or `None` when `key` is
    /// not remembered.
    pub fn get(&self, key: &[u8]) -> Option<Option<usize>> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |e| Self::key(&self.keys, e) == key)
            .map(|e| e.size)
    }

    /// Forgets every key, keeping the memory for the next batch's.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Memo;

    #[test]
    fn remembers_each_key_once_with_its_latest_size_until_cleared() {
        let mut memo = Memo::default();
        for i in 0..1_000u32 {
            memo.insert(&i.to_be_bytes(), (i % 3 != 0).then_some(i as usize));
        }
        memo.insert(&7u32.to_be_bytes(), None);
        assert_eq!(memo.get(&7u32.to_be_bytes()), Some(None));
        assert_eq!(memo.get(&8u32.to_be_bytes()), Some(Some(8)));
        assert_eq!(memo.get(&9u32.to_be_bytes()), Some(None));
        assert_eq!(memo.get(&5_000u32.to_be_bytes()), None);
        // A key that is a prefix of another is another key.
        memo.insert(b"ab", Some(1));
        memo.insert(b"abc", Some(2));
        assert_eq!(
            (memo.get(b"ab"), memo.get(b"abc")),
            (Some(Some(1)), Some(Some(2)))
        );
        memo.clear();
        assert_eq!(memo.get(&8u32.to_be_bytes()), None);
    }
}
