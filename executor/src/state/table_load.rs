//! Rebuilding a partition's state from the checkpoint: a snapshot and the
//! deltas after it, merged in key order into one sorted load. Both are
//! stored rows (a stamped state's with their stamps), as the checkpoint
//! holds them.

use std::collections::BTreeMap;

use arrow_array::RecordBatch;

use super::{Change, Key, StateTable, twice};
use crate::error::ExecutorError;

/// The last thing the deltas did to each key they name: its row, or
/// `None` for a key removed.
type Ops = BTreeMap<Key, Option<Key>>;

impl StateTable {
    /// Fills the empty state with every row of a snapshot (stored rows),
    /// which is version `version` (unit tests build states so).
    #[cfg(test)]
    pub fn load(&mut self, rows: &[RecordBatch], version: u64) -> Result<(), ExecutorError> {
        self.rebuild(rows, &[], version)
    }

    /// Fills the empty state with a snapshot's rows changed by `deltas`,
    /// in order, which makes it version `version`. A snapshot in key order
    /// (any this executor wrote) is merged with the deltas and loaded as
    /// sorted tables at once; another is written row by row, then each
    /// delta applied.
    pub fn rebuild(
        &mut self,
        snapshot: &[RecordBatch],
        deltas: &[Change],
        version: u64,
    ) -> Result<(), ExecutorError> {
        super::blocking(|| self.rebuild_now(snapshot, deltas, version))
    }

    fn rebuild_now(
        &mut self,
        snapshot: &[RecordBatch],
        deltas: &[Change],
        version: u64,
    ) -> Result<(), ExecutorError> {
        if self.len > 0 {
            return Err(ExecutorError::TaskPanicked(
                "a snapshot loaded into a state that holds rows".into(),
            ));
        }
        let ops = self.ops(deltas)?;
        let mut unsorted = false;
        let mut counted = (0u64, 0u64);
        let ingested = self.space.ingest(|write| {
            let mut count = |k: &[u8], v: &[u8]| {
                counted = (counted.0 + 1, counted.1 + (k.len() + v.len()) as u64);
                write(k, v)
            };
            let mut pending = ops.iter().peekable();
            self.each_pair(snapshot, |prev, k, v| {
                if prev.is_some_and(|l| l >= k) {
                    unsorted = true;
                    return Err(ExecutorError::TaskPanicked(
                        "a snapshot out of key order".into(),
                    ));
                }
                // The deltas' keys before this one, then this one's own.
                while let Some((op_key, op)) = pending.next_if(|(o, _)| &o[..] < k) {
                    if let Some(value) = op {
                        count(op_key, value)?;
                    }
                }
                match pending.next_if(|(o, _)| &o[..] == k) {
                    Some((_, Some(value))) => count(k, value),
                    Some((_, None)) => Ok(()),
                    None => count(k, v),
                }
            })?;
            for (op_key, op) in pending {
                if let Some(value) = op {
                    count(op_key, value)?;
                }
            }
            Ok(())
        });
        (self.len, self.bytes) = match ingested {
            Ok(()) => counted,
            Err(_) if unsorted => {
                let counted = self.write_unsorted(snapshot)?;
                (self.len, self.bytes) = counted;
                for d in deltas {
                    self.apply(d, version)?;
                }
                (self.len, self.bytes)
            }
            Err(e) => return Err(e),
        };
        self.version = Some(version);
        Ok(())
    }

    /// What `deltas` did, key by key: each change's upserts, then its
    /// deletes, in order.
    fn ops(&self, deltas: &[Change]) -> Result<Ops, ExecutorError> {
        let mut ops = Ops::new();
        for d in deltas {
            self.each_pair(std::slice::from_ref(&d.upserts), |_, k, v| {
                ops.insert(k.into(), Some(v.into()));
                Ok(())
            })?;
            let keys = self.codec.key_rows(&d.deletes)?;
            for i in 0..keys.len() {
                ops.insert(keys.get(i).into(), None);
            }
        }
        Ok(ops)
    }

    /// Writes a snapshot whose rows are not in key order; its rows and bytes.
    fn write_unsorted(&self, rows: &[RecordBatch]) -> Result<(u64, u64), ExecutorError> {
        let mut seen = std::collections::HashSet::new();
        let mut counted = (0u64, 0u64);
        for b in rows {
            let mut pairs: Vec<(Key, Key)> = Vec::with_capacity(b.num_rows());
            self.each_pair(std::slice::from_ref(b), |_, k, v| {
                if !seen.insert(Box::<[u8]>::from(k)) {
                    return Err(twice());
                }
                counted = (counted.0 + 1, counted.1 + (k.len() + v.len()) as u64);
                pairs.push((k.into(), v.into()));
                Ok(())
            })?;
            let writes: Vec<_> = pairs.iter().map(|(k, v)| (&k[..], Some(&v[..]))).collect();
            // The space was empty, and no key comes twice: none is there.
            self.space.write(&writes, |_| Some(None))?;
        }
        Ok(counted)
    }

    /// Calls `f` with the key before, and the (key, value) pair of each
    /// of `rows` (stored rows: a stamped state's with their stamps), in
    /// order.
    fn each_pair(
        &self,
        rows: &[RecordBatch],
        mut f: impl FnMut(Option<&[u8]>, &[u8], &[u8]) -> Result<(), ExecutorError>,
    ) -> Result<(), ExecutorError> {
        let mut last: Option<Box<[u8]>> = None;
        let width = self.stored_schema().fields().len();
        for b in rows {
            if b.num_columns() != width {
                return Err(ExecutorError::TaskPanicked(format!(
                    "state rows of {} columns loaded into a state that stores {width}",
                    b.num_columns()
                )));
            }
            let keys = self.codec.key_rows(b)?;
            let values = self.codec.value_rows(b)?;
            for i in 0..keys.len() {
                let prev = match i {
                    0 => last.as_deref(),
                    i => Some(keys.get(i - 1)),
                };
                let value = values.as_ref().map_or(&[][..], |v| v.row(i).data());
                f(prev, keys.get(i), value)?;
            }
            if keys.len() > 0 {
                last = Some(keys.get(keys.len() - 1).into());
            }
        }
        Ok(())
    }
}
