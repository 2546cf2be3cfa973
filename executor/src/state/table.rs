//! One partition's state: state rows (the key, then the operator's
//! values), at most one per key, kept in the executor's local store
//! ([`super::local`]) in the order of their keys.
//!
//! A batch changes the state by one [`Change`]: rows to insert or replace,
//! and keys to remove. Applying it reads and writes only the keys it
//! names, so a batch costs what it changes, not the size of the state.
//! The rows' order is their keys' order, so a state rebuilt from a
//! snapshot and deltas holds the same rows in the same order as the state
//! that was kept, and writes the same snapshot bytes.
//!
//! A *stamped* state (an operator whose keys expire, `state_ttl_ms`)
//! stores each row with one more column, [`TOUCHED`]: the time of the
//! batch that last upserted its key (see `table_stamp.rs`). Operators
//! never see it: [`StateTable::schema`], `find`, `lookup` and `scan` are
//! the operator's rows; the deltas and snapshots hold the stored rows
//! ([`StateTable::stored_schema`]), so a state rebuilt from the checkpoint
//! has the same stamps.

use foldhash::HashMap;
use std::sync::{Mutex, MutexGuard};

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_select::concat::concat_batches;

use super::local::{Frozen, Pair, Space, Stored};
use super::memo::Memo;
use super::rows::{KeyRows, RowCodec};
use crate::error::ExecutorError;

/// The column of a delta that marks a removed key.
pub const DELETED: &str = "__sluice_deleted";

/// The last column of a stamped state's stored rows: the `now` of the
/// batch that last upserted the row's key (an Int64, never null).
pub const TOUCHED: &str = "__sluice_touched";

/// Key bytes, owned.
type Key = Box<[u8]>;

/// A key's new value, or `None`: the key leaves the state.
type Write<'a> = (&'a [u8], Option<&'a [u8]>);

/// Rows decoded from the store at once when scanning.
const SCAN_ROWS: usize = 64 * 1024;

/// What one batch did to a partition's state.
#[derive(Debug, Clone)]
pub struct Change {
    /// Rows that insert or replace their key's row.
    pub upserts: RecordBatch,
    /// State rows whose keys leave the state (evicted behind the watermark).
    pub deletes: RecordBatch,
}

/// The state rows of some keys.
#[derive(Debug)]
pub struct Found {
    /// Each key's row once, in the order the keys first appear.
    pub rows: RecordBatch,
    /// For each row asked about, where its key's row is in `rows`;
    /// `None`: the state has no row of its key.
    pub at: Vec<Option<u32>>,
    /// How many distinct keys the state has no row of.
    pub new: usize,
}

/// One partition's state.
pub struct StateTable {
    /// The codec of the stored rows: the operator's, and the stamp of a
    /// stamped state.
    codec: RowCodec,
    /// The operator's rows (the stored rows less the stamp).
    schema: SchemaRef,
    /// Whether the stored rows carry [`TOUCHED`].
    stamped: bool,
    /// The time this batch's upserts are stamped with (a stamped state).
    now: Option<i64>,
    space: Space,
    len: u64,
    /// The bytes of every key and value.
    bytes: u64,
    /// The batch whose state this is; `None` before the first batch.
    pub version: Option<u64>,
    /// The size of each value [`StateTable::find`] read (`None`: no row)
    /// since the last change, so applying a change to the store reads no
    /// key twice (the memory tier reads nothing before a write: its
    /// states keep no memo).
    memo: Mutex<Memo>,
}

impl std::fmt::Debug for StateTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateTable")
            .field("len", &self.len)
            .field("bytes", &self.bytes)
            .field("version", &self.version)
            .field("stamped", &self.stamped)
            .finish()
    }
}

fn fail(e: ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("state: {e}"))
}

/// Runs `f`, which reads or writes the local store and may take a while,
/// where it does not hold up the executor's other tasks (its heartbeats
/// among them): on a multi-threaded runtime, the worker hands its other
/// tasks to another thread first.
pub(super) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("state memo lock poisoned")
}

fn twice() -> ExecutorError {
    // Invariant: merging leaves one row per key.
    ExecutorError::TaskPanicked("state holds two rows for one key".into())
}

impl StateTable {
    /// An empty state in `space`, with state rows of `schema` whose first
    /// `keys` columns are the key; `stamped`: each row is stored with the
    /// time of its key's last upsert (see the module's header).
    pub fn new(
        space: Space,
        schema: SchemaRef,
        keys: usize,
        stamped: bool,
    ) -> Result<Self, ExecutorError> {
        let stored = match stamped {
            true => stamp::stored_schema(&schema),
            false => schema.clone(),
        };
        Ok(StateTable {
            codec: RowCodec::new(stored, keys)?,
            schema,
            stamped,
            now: None,
            space,
            len: 0,
            bytes: 0,
            version: None,
            memo: Default::default(),
        })
    }

    /// The operator's state rows.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The rows as stored, in deltas and snapshots: the operator's, then
    /// [`TOUCHED`] for a stamped state.
    pub fn stored_schema(&self) -> &SchemaRef {
        self.codec.schema()
    }

    /// How many leading columns of a state row are its key.
    pub fn keys(&self) -> usize {
        self.codec.keys()
    }

    pub fn is_stamped(&self) -> bool {
        self.stamped
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// The bytes of the state's keys and values.
    pub fn bytes(&self) -> usize {
        self.bytes as usize
    }

    /// Every state row, in key order: a scan of the whole state.
    pub fn scan(&self) -> Result<RecordBatch, ExecutorError> {
        self.view(&self.scan_stored()?)
    }

    /// The state rows whose key begins with `leading`, the values of the
    /// key's first columns (one row each), in key order: a scan of those
    /// keys alone.
    pub fn scan_prefix(&self, leading: &[ArrayRef]) -> Result<RecordBatch, ExecutorError> {
        let prefix = self.codec.key_prefix(leading)?;
        self.view(&self.scan_stored_from(&prefix, None)?)
    }

    /// The state rows whose key begins with `leading` and sorts below a
    /// key that begins with `below` (both the values of the key's first
    /// columns, one row each), in key order.
    pub fn scan_prefix_below(
        &self,
        leading: &[ArrayRef],
        below: &[ArrayRef],
    ) -> Result<RecordBatch, ExecutorError> {
        let prefix = self.codec.key_prefix(leading)?;
        let below = self.codec.key_prefix(below)?;
        self.view(&self.scan_stored_from(&prefix, Some(&below))?)
    }

    /// The state rows that `keep` selects, in key order: a scan of the
    /// whole state that decodes the key columns first, in chunks, and the
    /// rest only of the rows kept. `keep` is given a chunk's key columns
    /// and says which of its rows to keep.
    pub fn scan_keys_where(
        &self,
        mut keep: impl FnMut(&[ArrayRef]) -> Result<BooleanArray, ExecutorError>,
    ) -> Result<RecordBatch, ExecutorError> {
        let stored = blocking(|| {
            let mut batches = Vec::new();
            self.each_pairs(&[], None, |chunk| {
                let mask = keep(&self.codec.decode_keys(chunk)?)?;
                if mask.len() != chunk.len() {
                    return Err(ExecutorError::TaskPanicked(format!(
                        "a state scan's filter answered for {} of {} rows",
                        mask.len(),
                        chunk.len()
                    )));
                }
                let kept: Vec<_> = chunk
                    .iter()
                    .zip(mask.iter())
                    .filter(|(_, k)| k.unwrap_or(false))
                    .map(|(pair, _)| *pair)
                    .collect();
                if !kept.is_empty() {
                    batches.push(self.codec.decode(&kept)?);
                }
                Ok(())
            })?;
            concat_batches(self.stored_schema(), &batches).map_err(fail)
        })?;
        self.view(&stored)
    }

    /// Every stored row (with its stamp, when stamped), in key order: a
    /// scan of the whole state.
    pub fn scan_stored(&self) -> Result<RecordBatch, ExecutorError> {
        self.scan_stored_from(&[], None)
    }

    /// The stored rows whose encoded key begins with `prefix` and sorts
    /// below `below`.
    fn scan_stored_from(
        &self,
        prefix: &[u8],
        below: Option<&[u8]>,
    ) -> Result<RecordBatch, ExecutorError> {
        blocking(|| {
            let mut batches = Vec::new();
            self.each_chunk(prefix, below, |rows| {
                batches.push(rows);
                Ok(())
            })?;
            concat_batches(self.stored_schema(), &batches).map_err(fail)
        })
    }

    /// Calls `f` with every stored row whose encoded key begins with
    /// `prefix` and sorts below `below`, in key order, in batches of at
    /// most `SCAN_ROWS` rows (at least one batch, maybe empty).
    fn each_chunk(
        &self,
        prefix: &[u8],
        below: Option<&[u8]>,
        mut f: impl FnMut(RecordBatch) -> Result<(), ExecutorError>,
    ) -> Result<(), ExecutorError> {
        self.each_pairs(prefix, below, |chunk| f(self.codec.decode(chunk)?))
    }

    /// [`Self::each_chunk`] of the stored pairs, undecoded.
    fn each_pairs(
        &self,
        prefix: &[u8],
        below: Option<&[u8]>,
        f: impl FnMut(&[(&[u8], &[u8])]) -> Result<(), ExecutorError>,
    ) -> Result<(), ExecutorError> {
        let rows = SCAN_ROWS.min(self.len()).max(1);
        self.space.scan(prefix, below, rows, f)
    }

    /// The state as it is now, for a snapshot written while batches go on.
    pub fn freeze(&self) -> Result<FrozenState, ExecutorError> {
        Ok(FrozenState {
            frozen: self.space.freeze(),
            codec: RowCodec::new(self.stored_schema().clone(), self.codec.keys())?,
        })
    }

    /// The state rows of the keys of `batches`' rows (whose leading
    /// columns are a state key), each once.
    pub fn find(&self, batches: &[RecordBatch]) -> Result<Found, ExecutorError> {
        blocking(|| self.find_now(batches))
    }

    fn find_now(&self, batches: &[RecordBatch]) -> Result<Found, ExecutorError> {
        let keys = batches
            .iter()
            .map(|b| self.codec.key_rows(b))
            .collect::<Result<Vec<_>, _>>()?;
        let rows = keys.iter().map(KeyRows::len).sum();
        // Each key once, in the order keys first appear.
        let mut distinct: Vec<&[u8]> = Vec::new();
        let mut index: HashMap<&[u8], u32> =
            HashMap::with_capacity_and_hasher(rows, Default::default());
        let mut of_row = Vec::with_capacity(rows);
        for key in keys.iter().flat_map(|k| (0..k.len()).map(|i| k.get(i))) {
            let d = *index.entry(key).or_insert_with(|| {
                distinct.push(key);
                distinct.len() as u32 - 1
            });
            of_row.push(d);
        }
        let values = self.get_sorted(&distinct)?;
        let remember = !self.space.in_memory();
        let mut memo = lock(&self.memo);
        let mut found: Vec<(&[u8], &Stored)> = Vec::new();
        let mut at_distinct = Vec::with_capacity(distinct.len());
        for (key, value) in distinct.iter().zip(&values) {
            if remember {
                memo.insert(key, value.as_ref().map(|v| v.len()));
            }
            at_distinct.push(value.as_ref().map(|v| {
                found.push((key, v));
                found.len() as u32 - 1
            }));
        }
        Ok(Found {
            rows: self.view(&self.codec.decode(&found)?)?,
            at: of_row.iter().map(|&d| at_distinct[d as usize]).collect(),
            new: distinct.len() - found.len(),
        })
    }

    /// The value of each of `keys`, read in key order (lookups of nearby
    /// keys share the store's paths and blocks).
    fn get_sorted(&self, keys: &[&[u8]]) -> Result<Vec<Option<Stored>>, ExecutorError> {
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_unstable_by_key(|&i| keys[i as usize]);
        let mut values = vec![None; keys.len()];
        for i in order {
            values[i as usize] = self.space.get(keys[i as usize])?;
        }
        Ok(values)
    }

    /// Records that no key of `rows` (state rows) is in the state, so
    /// applying the next change reads none of them: the caller's
    /// invariant (a join's new rows carry their batch in their ids), which
    /// debug builds check. A join's new keys are most of its writes.
    pub fn vouch_new(&self, rows: &RecordBatch) -> Result<(), ExecutorError> {
        // The memory tier reads nothing before a write: only the store's
        // writes are spared their reads.
        let remember = !self.space.in_memory();
        if !remember && !cfg!(debug_assertions) {
            return Ok(());
        }
        let keys = self.codec.key_rows(rows)?;
        let mut memo = lock(&self.memo);
        for i in 0..keys.len() {
            let key = keys.get(i);
            debug_assert!(
                !self.space.contains(key)?,
                "a key vouched new is in the state"
            );
            if remember {
                memo.insert(key, None);
            }
        }
        Ok(())
    }

    /// The state rows of the keys in `partials`, each once, in the order
    /// the keys first appear there; and how many keys are new.
    pub fn lookup(&self, partials: &[RecordBatch]) -> Result<(RecordBatch, usize), ExecutorError> {
        let found = self.find(partials)?;
        Ok((found.rows, found.new))
    }

    /// Whether each row of `batch` (state rows) has a key the state does
    /// not hold.
    pub fn is_new(&self, batch: &RecordBatch) -> Result<BooleanArray, ExecutorError> {
        blocking(|| self.is_new_now(batch))
    }

    fn is_new_now(&self, batch: &RecordBatch) -> Result<BooleanArray, ExecutorError> {
        let keys = self.codec.key_rows(batch)?;
        (0..keys.len())
            .map(|i| Ok(Some(!self.space.contains(keys.get(i))?)))
            .collect()
    }

    /// Whether each row of `batch` (state rows) has a key that neither the
    /// state nor an earlier row of `batch` has: the first of its key.
    pub fn first_new(&self, batch: &RecordBatch) -> Result<BooleanArray, ExecutorError> {
        blocking(|| self.first_new_now(batch))
    }

    fn first_new_now(&self, batch: &RecordBatch) -> Result<BooleanArray, ExecutorError> {
        let keys = self.codec.key_rows(batch)?;
        let mut seen: std::collections::HashSet<&[u8]> = Default::default();
        (0..keys.len())
            .map(|i| {
                let key = keys.get(i);
                Ok(Some(seen.insert(key) && !self.space.contains(key)?))
            })
            .collect()
    }

    /// Applies one batch's change, which makes this state version
    /// `version`: first its upserts (each replaces its key's row, or adds
    /// one), then its deletes. Only the keys it names are read or written.
    /// A stamped state stamps upserts of the operator's rows with the
    /// batch's time ([`StateTable::set_now`]) and keeps the stamps of
    /// stored rows (a delta read back).
    pub fn apply(&mut self, change: &Change, version: u64) -> Result<(), ExecutorError> {
        blocking(|| self.apply_now(change, version))
    }

    fn apply_now(&mut self, change: &Change, version: u64) -> Result<(), ExecutorError> {
        let (up, gone) = (&self.stored(&change.upserts)?, &change.deletes);
        let up_keys = self.codec.key_rows(up)?;
        let values = self.codec.value_rows(up)?;
        let gone_keys = self.codec.key_rows(gone)?;
        let mut writes: Vec<Write> = Vec::with_capacity(up_keys.len() + gone_keys.len());
        for i in 0..up_keys.len() {
            let value = values.as_ref().map_or(&[][..], |v| v.row(i).data());
            writes.push((up_keys.get(i), Some(value)));
        }
        writes.extend((0..gone_keys.len()).map(|i| (gone_keys.get(i), None)));
        let writes = last_of_each_key(writes)?;
        // The memo is of this change's reads: forgotten once they are
        // done, whether they succeed or not.
        let memo = self.memo.get_mut().expect("state memo lock poisoned");
        let written = self.space.write(&writes, |key| memo.get(key));
        memo.clear();
        let replaced = written?;
        let added = writes
            .iter()
            .filter_map(|(k, v)| v.map(|v| k.len() + v.len()));
        let (count, bytes) = added.fold((0, 0), |(n, b), size| (n + 1, b + size as u64));
        // Invariant: a write replaces or removes only pairs the state holds.
        self.len = (self.len + count)
            .checked_sub(replaced.pairs)
            .expect("state rows counted below zero");
        self.bytes = (self.bytes + bytes)
            .checked_sub(replaced.bytes)
            .expect("state bytes counted below zero");
        self.version = Some(version);
        Ok(())
    }
}

/// `writes` (upserts, then deletes) in key order, one per key: a key's
/// delete wins over its upsert, and a key upserted twice fails.
fn last_of_each_key(mut writes: Vec<Write<'_>>) -> Result<Vec<Write<'_>>, ExecutorError> {
    // Stable: a key's upsert stays before its deletes.
    writes.sort_by(|a, b| a.0.cmp(b.0));
    let mut kept: Vec<Write> = Vec::with_capacity(writes.len());
    for (key, value) in writes {
        match kept.last_mut() {
            Some(last) if last.0 == key => match (last.1, value) {
                (Some(_), Some(_)) => return Err(twice()),
                (_, None) => last.1 = None,
                (None, Some(_)) => unreachable!("deletes sort after the upserts"),
            },
            _ => kept.push((key, value)),
        }
    }
    Ok(kept)
}

/// A state version frozen for a snapshot: readable in the background while
/// the table takes the next batches.
pub struct FrozenState {
    frozen: Frozen,
    codec: RowCodec,
}

impl FrozenState {
    /// The stored rows' schema (see [`StateTable::stored_schema`]).
    pub fn schema(&self) -> &SchemaRef {
        self.codec.schema()
    }

    /// Every stored row, in key order, in batches of at most `SCAN_ROWS`
    /// rows.
    pub fn batches(&self) -> impl Iterator<Item = Result<RecordBatch, ExecutorError>> + '_ {
        let mut pairs = self.frozen.pairs().peekable();
        std::iter::from_fn(move || {
            pairs.peek()?;
            let chunk: Result<Vec<Pair>, _> = pairs.by_ref().take(SCAN_ROWS).collect();
            Some(chunk.and_then(|c| self.codec.decode(&c)))
        })
    }
}

#[path = "table_delta.rs"]
mod delta;

#[path = "table_load.rs"]
mod load;

#[path = "table_stamp.rs"]
mod stamp;

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
