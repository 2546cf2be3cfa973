//! One partition's pairs (a [`Space`]): in the memory tier while the
//! executor's budget for it allows, then in a keyspace of the local store,
//! for good. Reads and writes are the same on either tier.

use std::cell::OnceCell;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, Readable};
use tracing::{info, warn};

use super::memory::{Budget, Map, Memory, Replaced};
use super::{Pair, Stored, failed};
use crate::error::ExecutorError;

/// One partition's pairs: sorted keys, each with one value; in memory
/// while the memory tier's budget allows, then in a keyspace of the store.
pub struct Space {
    db: Database,
    name: String,
    memtable_bytes: u64,
    tier: Mutex<Tier>,
}

enum Tier {
    Memory(Memory),
    Disk(Keyspace),
}

impl Drop for Space {
    fn drop(&mut self) {
        if let Tier::Disk(ks) = &*lock(&self.tier)
            && let Err(e) = self.db.delete_keyspace(ks.clone())
        {
            warn!(error = %e, "local state keyspace not deleted");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("local state lock poisoned")
}

/// A point-in-time view of a [`Space`], readable while the space moves on.
pub enum Frozen {
    Memory(Arc<Map>),
    Disk(fjall::Snapshot, Keyspace),
}

/// Pairs read in key order.
type Pairs<'a> = Box<dyn Iterator<Item = Result<Pair, ExecutorError>> + Send + 'a>;

/// Pairs copied out of a map at once, so that a scan walks the map's
/// nodes once, not from the root for each pair.
const MEMORY_SCAN: usize = 4096;

fn memory_pairs(map: Arc<Map>) -> Pairs<'static> {
    // The last key copied out; `None` once the map is done.
    let mut after: Option<Bound<Stored>> = Some(Bound::Unbounded);
    let mut chunk = Vec::<Pair>::new().into_iter();
    Box::new(std::iter::from_fn(move || {
        if let Some(pair) = chunk.next() {
            return Some(Ok(pair));
        }
        let from = after.take()?;
        let from = from.as_ref().map(|k| &k[..]);
        let next: Vec<Pair> = map
            .range::<[u8], _>((from, Bound::Unbounded))
            .take(MEMORY_SCAN)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if next.len() == MEMORY_SCAN {
            after = next.last().map(|(k, _)| Bound::Excluded(k.clone()));
        }
        chunk = next.into_iter();
        chunk.next().map(Ok)
    }))
}

impl Frozen {
    /// Every pair, in key order.
    pub fn pairs(&self) -> Pairs<'_> {
        match self {
            Frozen::Memory(map) => memory_pairs(map.clone()),
            Frozen::Disk(snapshot, ks) => disk_pairs(snapshot.iter(ks)),
        }
    }
}

fn disk_pairs(iter: fjall::Iter) -> Pairs<'static> {
    Box::new(iter.map(|g| g.into_inner().map_err(|e| failed("state scan", e))))
}

impl Space {
    pub(super) fn new(
        db: Database,
        name: String,
        memtable_bytes: u64,
        budget: Arc<Budget>,
    ) -> Self {
        Space {
            db,
            name,
            memtable_bytes,
            tier: Mutex::new(Tier::Memory(Memory::new(budget))),
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Stored>, ExecutorError> {
        match &*lock(&self.tier) {
            Tier::Memory(m) => Ok(m.get(key)),
            Tier::Disk(ks) => ks.get(key).map_err(|e| failed("state lookup", e)),
        }
    }

    pub fn contains(&self, key: &[u8]) -> Result<bool, ExecutorError> {
        match &*lock(&self.tier) {
            Tier::Memory(m) => Ok(m.contains(key)),
            Tier::Disk(ks) => ks.contains_key(key).map_err(|e| failed("state lookup", e)),
        }
    }

    /// Writes puts (`Some`) and deletes (`None`) at once, each key at
    /// most once: the pairs they replaced or removed. The memory tier
    /// knows them as it writes; the store's are read first, except the
    /// value sizes `known` gives (`Some(None)`: the key has no pair).
    pub fn write(
        &self,
        changes: &[(&[u8], Option<&[u8]>)],
        known: impl Fn(&[u8]) -> Option<Option<usize>>,
    ) -> Result<Replaced, ExecutorError> {
        let mut tier = lock(&self.tier);
        if let Tier::Memory(m) = &mut *tier {
            if let Some(replaced) = m.write(changes) {
                return Ok(replaced);
            }
            *tier = Tier::Disk(self.spill(m)?);
        }
        let Tier::Disk(ks) = &*tier else {
            unreachable!("a space spilled is on disk");
        };
        let mut replaced = Replaced::default();
        for &(key, _) in changes {
            let old = match known(key) {
                Some(size) => size,
                None => ks
                    .get(key)
                    .map_err(|e| failed("state lookup", e))?
                    .map(|v| v.len()),
            };
            if let Some(size) = old {
                replaced.pairs += 1;
                replaced.bytes += (key.len() + size) as u64;
            }
        }
        let mut batch = self.db.batch().durability(None);
        for &(key, value) in changes {
            match value {
                Some(v) => batch.insert(ks, key, v),
                None => batch.remove(ks, key),
            }
        }
        batch.commit().map_err(|e| failed("state write", e))?;
        Ok(replaced)
    }

    /// Whether the pairs are in the memory tier, where a write reads
    /// nothing first.
    pub fn in_memory(&self) -> bool {
        matches!(*lock(&self.tier), Tier::Memory(_))
    }

    /// A keyspace of the store holding the memory tier's pairs, which the
    /// tier gives up.
    fn spill(&self, memory: &mut Memory) -> Result<Keyspace, ExecutorError> {
        let ks = self.keyspace()?;
        let pairs = memory.take();
        info!(space = %self.name, pairs = pairs.len(), "state moved from memory to the local store");
        let mut ingestion = ks.start_ingestion().map_err(|e| failed("state spill", e))?;
        for (k, v) in pairs.iter() {
            ingestion
                .write(k.clone(), v.clone())
                .map_err(|e| failed("state spill", e))?;
        }
        ingestion.finish().map_err(|e| failed("state spill", e))?;
        Ok(ks)
    }

    fn keyspace(&self) -> Result<Keyspace, ExecutorError> {
        let memtable = self.memtable_bytes;
        self.db
            .keyspace(&self.name, || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .manual_journal_persist(true)
            })
            .map_err(|e| failed("cannot create a state keyspace", e))
    }

    /// Fills the (empty) space with the pairs `fill` writes, whose keys
    /// must ascend strictly: in memory while they fit, then as the store's
    /// sorted tables, the fastest load there is. When `fill` fails,
    /// nothing is loaded.
    pub fn ingest(
        &self,
        fill: impl FnOnce(
            &mut dyn FnMut(&[u8], &[u8]) -> Result<(), ExecutorError>,
        ) -> Result<(), ExecutorError>,
    ) -> Result<(), ExecutorError> {
        let mut tier = lock(&self.tier);
        let Tier::Memory(memory) = &mut *tier else {
            return Err(ExecutorError::TaskPanicked(
                "a state loaded into a space that holds pairs".into(),
            ));
        };
        // The keyspace is made when the pairs outgrow the memory tier; it
        // outlives the ingestion that borrows it.
        let disk: OnceCell<Keyspace> = OnceCell::new();
        let mut ingestion = None;
        let mut write = |k: &[u8], v: &[u8]| {
            if ingestion.is_none() && memory.push(k, v) {
                return Ok(());
            }
            if ingestion.is_none() {
                if disk.get().is_none() {
                    let _ = disk.set(self.keyspace()?);
                }
                let ks = disk.get().expect("the keyspace was just set");
                let mut ing = ks.start_ingestion().map_err(|e| failed("state load", e))?;
                for (pk, pv) in memory.take().iter() {
                    ing.write(pk.clone(), pv.clone())
                        .map_err(|e| failed("state load", e))?;
                }
                ingestion = Some(ing);
            }
            let ing = ingestion.as_mut().expect("the ingestion was just started");
            ing.write(k, v).map_err(|e| failed("state load", e))
        };
        let filled = fill(&mut write).and_then(|()| match ingestion {
            Some(ing) => ing.finish().map_err(|e| failed("state load", e)),
            None => Ok(()),
        });
        match (filled, disk.into_inner()) {
            (Ok(()), None) => Ok(()),
            (Ok(()), Some(ks)) => {
                *tier = Tier::Disk(ks);
                Ok(())
            }
            (Err(e), ks) => {
                memory.take();
                if let Some(ks) = ks
                    && let Err(e) = self.db.delete_keyspace(ks)
                {
                    warn!(error = %e, "local state keyspace not deleted");
                }
                Err(e)
            }
        }
    }

    /// Every pair, in key order.
    #[cfg(test)]
    pub fn pairs(&self) -> Pairs<'static> {
        match &*lock(&self.tier) {
            Tier::Memory(m) => memory_pairs(m.frozen()),
            Tier::Disk(ks) => disk_pairs(ks.iter()),
        }
    }

    /// Calls `f` with every pair whose key begins with `prefix` (every
    /// pair, when it is empty) and sorts below `below` (when given), in
    /// key order, in chunks of at most `rows` pairs (at least one chunk,
    /// maybe empty). The memory tier lends its pairs; the store's are read
    /// into the chunk.
    pub fn scan(
        &self,
        prefix: &[u8],
        below: Option<&[u8]>,
        rows: usize,
        mut f: impl FnMut(&[(&[u8], &[u8])]) -> Result<(), ExecutorError>,
    ) -> Result<(), ExecutorError> {
        let mut chunk: Vec<(&[u8], &[u8])> = Vec::with_capacity(rows);
        let range = (
            Bound::Included(prefix),
            below.map_or(Bound::Unbounded, Bound::Excluded),
        );
        if below.is_some_and(|b| b <= prefix) {
            return f(&chunk);
        }
        match self.freeze() {
            Frozen::Memory(map) => {
                let mut sent = false;
                let pairs = map.range::<[u8], _>(range);
                // An empty prefix reads no key's bytes: a whole scan
                // touches only the pairs it lends.
                for (k, v) in pairs.take_while(|(k, _)| prefix.is_empty() || k.starts_with(prefix))
                {
                    chunk.push((k, v));
                    if chunk.len() == rows {
                        f(&chunk)?;
                        chunk.clear();
                        sent = true;
                    }
                }
                match chunk.is_empty() && sent {
                    true => Ok(()),
                    false => f(&chunk),
                }
            }
            Frozen::Disk(snapshot, ks) => {
                let mut owned: Vec<Pair> = Vec::with_capacity(rows);
                let pairs = disk_pairs(snapshot.range::<&[u8], _>(&ks, range));
                let mut pairs = pairs
                    .take_while(|p| match p {
                        Ok((k, _)) => k.starts_with(prefix),
                        Err(_) => true,
                    })
                    .peekable();
                loop {
                    owned.clear();
                    for pair in pairs.by_ref().take(rows) {
                        owned.push(pair?);
                    }
                    let lent: Vec<(&[u8], &[u8])> =
                        owned.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                    f(&lent)?;
                    if pairs.peek().is_none() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The space as it is now, to read while it changes.
    pub fn freeze(&self) -> Frozen {
        match &*lock(&self.tier) {
            Tier::Memory(m) => Frozen::Memory(m.frozen()),
            Tier::Disk(ks) => Frozen::Disk(self.db.snapshot(), ks.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LocalConfig, LocalStore};
    use super::*;

    fn store(memory_bytes: u64) -> LocalStore {
        LocalStore::open(&LocalConfig {
            dir: None,
            memory_bytes,
        })
        .unwrap()
    }

    fn key(i: u32) -> [u8; 4] {
        i.to_be_bytes()
    }

    fn all(space: &Space) -> Vec<(Vec<u8>, Vec<u8>)> {
        let pairs = space
            .pairs()
            .map(|p| p.map(|(k, v)| (k.to_vec(), v.to_vec())));
        pairs.collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn the_memory_tier_reads_and_writes_as_the_store_does() {
        let (memory, disk) = (store(1 << 30), store(0));
        let (m, d) = (memory.space(), disk.space());
        let mut seed = 7u64;
        for round in 0..20u32 {
            let mut writes: Vec<([u8; 4], Option<Vec<u8>>)> = Vec::new();
            for _ in 0..50 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = key((seed >> 33) as u32 % 200);
                if writes.iter().any(|(w, _)| *w == k) {
                    continue;
                }
                let value =
                    (!seed.is_multiple_of(3)).then(|| vec![round as u8; (seed % 40) as usize]);
                writes.push((k, value));
            }
            let writes: Vec<(&[u8], Option<&[u8]>)> =
                writes.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
            // Both tiers report the same pairs replaced: the memory
            // tier's as it writes, the store's read first.
            let replaced = m.write(&writes, |_| None).unwrap();
            assert_eq!(replaced, d.write(&writes, |_| None).unwrap());
            if round > 0 {
                assert!(replaced.pairs > 0, "round {round} replaced nothing");
            }
            assert_eq!(all(&m), all(&d), "round {round}");
            for i in 0..200 {
                assert_eq!(m.get(&key(i)).unwrap(), d.get(&key(i)).unwrap());
                assert_eq!(m.contains(&key(i)).unwrap(), d.contains(&key(i)).unwrap());
            }
        }
        assert!(m.in_memory());
        assert!(!d.in_memory());
        assert!(all(&m).len() > 100);
        assert_eq!(scanned(&m, 7), scanned(&d, 7));
        assert_eq!(scanned(&m, 7).concat(), all(&m));
    }

    #[test]
    fn a_scan_by_prefix_reads_the_keys_that_begin_with_it_below_a_bound_on_either_tier() {
        let (memory, disk) = (store(1 << 30), store(0));
        for space in [memory.space(), disk.space()] {
            // Keys 0..768: the prefix [0, 0, 1] is the first three bytes of
            // 256..512 in big-endian (0x00000100..0x000001ff).
            let writes: Vec<([u8; 4], [u8; 1])> = (0..768).map(|i| (key(i), [i as u8])).collect();
            let writes: Vec<(&[u8], Option<&[u8]>)> =
                writes.iter().map(|(k, v)| (&k[..], Some(&v[..]))).collect();
            space.write(&writes, |_| None).unwrap();
            let keys = |prefix: &[u8], below: Option<&[u8]>| -> Vec<Vec<u8>> {
                let mut keys = Vec::new();
                space
                    .scan(prefix, below, 7, |chunk| {
                        keys.extend(chunk.iter().map(|(k, _)| k.to_vec()));
                        Ok(())
                    })
                    .unwrap();
                keys
            };
            let want: Vec<Vec<u8>> = (256..512).map(|i| key(i).to_vec()).collect();
            assert_eq!(
                keys(&[0, 0, 1], None),
                want,
                "in memory: {}",
                space.in_memory()
            );
            assert_eq!(keys(&[0, 0, 3], None), Vec::<Vec<u8>>::new());
            assert_eq!(keys(&[], None).len(), 768);
            // Below a key: from the prefix's first key up to it.
            assert_eq!(keys(&[0, 0, 1], Some(&key(300))), want[..44]);
            assert_eq!(keys(&[0, 0, 1], Some(&key(600))), want);
            assert_eq!(keys(&[0, 0, 1], Some(&key(256))), Vec::<Vec<u8>>::new());
            assert_eq!(keys(&[0, 0, 1], Some(&[0, 0])), Vec::<Vec<u8>>::new());
            assert_eq!(keys(&[], Some(&key(10))).len(), 10);
        }
    }

    /// The chunks of a scan of `rows` pairs each.
    fn scanned(space: &Space, rows: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut chunks = Vec::new();
        space
            .scan(&[], None, rows, |chunk| {
                assert!(chunk.len() <= rows);
                chunks.push(
                    chunk
                        .iter()
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect(),
                );
                Ok(())
            })
            .unwrap();
        chunks
    }

    #[test]
    fn a_scan_of_the_memory_tier_reads_every_pair_once_and_then_ends() {
        let store = store(1 << 30);
        let space = store.space();
        let n = 2 * MEMORY_SCAN as u32 + 5;
        let writes: Vec<([u8; 4], [u8; 1])> = (0..n).map(|i| (key(i), [i as u8])).collect();
        let writes: Vec<(&[u8], Option<&[u8]>)> =
            writes.iter().map(|(k, v)| (&k[..], Some(&v[..]))).collect();
        space.write(&writes, |_| None).unwrap();
        let mut pairs = space.pairs();
        let keys: Vec<Vec<u8>> = pairs.by_ref().map(|p| p.unwrap().0.to_vec()).collect();
        assert_eq!(keys, (0..n).map(|i| key(i).to_vec()).collect::<Vec<_>>());
        assert!(pairs.next().is_none(), "a scan that ended starts again");
    }

    #[test]
    fn a_space_past_the_budget_moves_to_the_store_with_its_pairs() {
        // Room for about a hundred pairs of 36 bytes.
        let store = store(2 * 100 * 100);
        let space = store.space();
        let before = space.freeze();
        let mut moved_at = None;
        for i in 0..300u32 {
            space
                .write(&[(&key(i), Some(&[1u8; 32][..]))], |_| None)
                .unwrap();
            if moved_at.is_none() && !space.in_memory() {
                moved_at = Some(i);
            }
        }
        let moved_at = moved_at.expect("the space moved to the store");
        assert!((50..150).contains(&moved_at), "moved at pair {moved_at}");
        assert_eq!(store.budget.used(), 0);
        let keys: Vec<Vec<u8>> = all(&space).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, (0..300).map(|i| key(i).to_vec()).collect::<Vec<_>>());
        // A view frozen before the move still reads what it saw.
        assert_eq!(before.pairs().count(), 0);
        space.write(&[(&key(5), None)], |_| None).unwrap();
        assert_eq!(space.get(&key(5)).unwrap(), None);
        assert_eq!(all(&space).len(), 299);
    }

    #[test]
    fn a_load_past_the_budget_moves_to_the_store_midway_and_keeps_every_pair() {
        let store = store(2 * 100 * 100);
        let space = store.space();
        space
            .ingest(|write| (0..1000).try_for_each(|i| write(&key(i), b"value")))
            .unwrap();
        assert!(!space.in_memory());
        assert_eq!(store.budget.used(), 0);
        let keys: Vec<Vec<u8>> = all(&space).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, (0..1000).map(|i| key(i).to_vec()).collect::<Vec<_>>());
        // A small load stays in memory.
        let small = store.space();
        small
            .ingest(|write| (0..10).try_for_each(|i| write(&key(i), b"value")))
            .unwrap();
        assert!(small.in_memory());
        assert_eq!(all(&small).len(), 10);
    }

    #[test]
    fn a_failed_load_loads_nothing_on_either_tier() {
        let store = store(2 * 100 * 100);
        for n in [10, 1000] {
            let space = store.space();
            let failed = space.ingest(|write| {
                (0..n).try_for_each(|i| write(&key(i), b"value"))?;
                Err(ExecutorError::TaskPanicked("a bad snapshot".into()))
            });
            assert!(failed.is_err());
            assert!(all(&space).is_empty(), "{n} pairs");
            assert_eq!(store.budget.used(), 0);
        }
    }
}
