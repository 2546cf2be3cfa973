//! The shuffle and state files of a stateful query, under its checkpoint
//! directory, and the pure decisions over them: which files rebuild a
//! state version, and which ones retention may delete.
//!
//! Their layout (`shuffle/<N>/…`, `state/<operator>/[g<G>/]<partition>/<N>.delta`
//! and `.snapshot`) is drawn in the checkpoint layout's table
//! (`checkpoint/layout.rs`).
//!
//! A restart with other state partitions begins a new state generation
//! (see [`Rescale`]); each generation's files are its own, so that no
//! create-only file of an earlier partitioning is ever written again.
//!
//! Every file is create-only. State version N (what batch N left) is the
//! latest snapshot at or below N, then every delta after it up to N. A
//! state file carries its identity and a checksum ([`identity`]), checked
//! when it is read.

pub mod identity;

use bytes::Bytes;

use crate::checkpoint::{SHUFFLE_DIR, STATE_DIR, padded, parse_padded};
use crate::error::{Error, Result};
use crate::storage::{Created, Path, Storage, Stores};

/// One file of a partition's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StateFile {
    Delta(u64),
    Snapshot(u64),
}

impl StateFile {
    pub fn version(self) -> u64 {
        match self {
            StateFile::Delta(v) | StateFile::Snapshot(v) => v,
        }
    }

    pub fn name(self) -> String {
        match self {
            StateFile::Delta(v) => format!("{}.delta", padded(v)),
            StateFile::Snapshot(v) => format!("{}.snapshot", padded(v)),
        }
    }

    /// The file `name` stands for: exactly what [`StateFile::name`] writes.
    pub fn parse(name: &str) -> Option<Self> {
        let (n, kind) = name.split_once('.')?;
        let v = parse_padded(n)?;
        match kind {
            "delta" => Some(StateFile::Delta(v)),
            "snapshot" => Some(StateFile::Snapshot(v)),
            _ => None,
        }
    }
}

/// The files that rebuild state version `version`, in the order to apply
/// them: the latest snapshot at or below it, then each delta after it.
/// `Err` names the first delta that is missing.
pub fn rebuild(files: &[StateFile], version: u64) -> std::result::Result<Vec<StateFile>, String> {
    let snapshot = files
        .iter()
        .filter_map(|f| match f {
            StateFile::Snapshot(v) if *v <= version => Some(*v),
            _ => None,
        })
        .max();
    let first = snapshot.map_or(0, |s| s + 1);
    let mut plan: Vec<StateFile> = snapshot.map(StateFile::Snapshot).into_iter().collect();
    for v in first..=version {
        if !files.contains(&StateFile::Delta(v)) {
            return Err(format!("{} is missing", StateFile::Delta(v).name()));
        }
        plan.push(StateFile::Delta(v));
    }
    Ok(plan)
}

/// The files retention may delete when every version from `oldest` on must
/// stay recoverable: everything older than the snapshot that rebuilds
/// `oldest` (nothing when no snapshot does).
pub fn expired(files: &[StateFile], oldest: u64) -> Vec<StateFile> {
    let Some(base) = files
        .iter()
        .filter_map(|f| match f {
            StateFile::Snapshot(v) if *v <= oldest => Some(*v),
            _ => None,
        })
        .max()
    else {
        return Vec::new();
    };
    files
        .iter()
        .copied()
        .filter(|f| f.version() < base || (f.version() == base && matches!(f, StateFile::Delta(_))))
        .collect()
}

/// Whether a state generation that began at `start` (`None`: empty)
/// needs the generation before it no more, when every version from
/// `oldest` on must stay recoverable: each of its partitions (`files`,
/// one list each) has a snapshot between `start` and `oldest`, which
/// rebuilds those versions from its own files.
pub fn standalone(files: &[Vec<StateFile>], start: Option<u64>, oldest: u64) -> bool {
    let Some(start) = start else {
        return true;
    };
    files.iter().all(|p| {
        p.iter()
            .any(|f| matches!(f, StateFile::Snapshot(v) if (start..=oldest).contains(v)))
    })
}

/// How state generation `generation` began: at state version
/// `state_version` (`None`: empty), from the `previous_partitions`
/// partitions of the generation before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rescale {
    pub generation: u64,
    pub state_version: Option<u64>,
    pub previous_partitions: u32,
    pub partitions: u32,
}

/// Where a partition of a rescaled generation is rebuilt from: every
/// partition of generation `generation`, `partitions` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildSource {
    pub generation: u64,
    pub partitions: u32,
}

/// The generation whose partitions hold the state that generation
/// `generation` began from (see [`Rescale`]): the one in which the batch
/// it began at committed. A generation that began at that same version
/// committed no batch (a restart with no batch between), so its files
/// hold nothing of its own: it is passed over, and a chain of such
/// restarts is rebuilt in one step, whatever the partitions in between.
/// `Err` names a generation whose rescale `rescales` lacks.
pub fn rebuild_source(
    rescales: &[Rescale],
    generation: u64,
) -> std::result::Result<RebuildSource, String> {
    let find = |g: u64| {
        rescales
            .iter()
            .find(|r| r.generation == g)
            .ok_or_else(|| format!("state generation {g} without the rescale that began it"))
    };
    let began = find(generation)?;
    let mut after = began;
    loop {
        let g = after.generation.saturating_sub(1);
        let source = RebuildSource {
            generation: g,
            partitions: after.previous_partitions,
        };
        if g == 0 {
            return Ok(source);
        }
        let before = find(g)?;
        if before.state_version != began.state_version {
            return Ok(source);
        }
        after = before;
    }
}

impl From<&sluice_proto::StateRescale> for Rescale {
    fn from(r: &sluice_proto::StateRescale) -> Self {
        Rescale {
            generation: r.generation,
            state_version: r.state_version,
            previous_partitions: r.previous_partitions,
            partitions: r.partitions,
        }
    }
}

impl From<Rescale> for sluice_proto::StateRescale {
    fn from(r: Rescale) -> Self {
        sluice_proto::StateRescale {
            generation: r.generation,
            state_version: r.state_version,
            previous_partitions: r.previous_partitions,
            partitions: r.partitions,
        }
    }
}

/// A query's shuffle and state files, in one state generation.
#[derive(Clone, Debug)]
pub struct StateStore {
    storage: Storage,
    /// The query's name: the last segment of its checkpoint directory.
    query: String,
    /// The state generation whose files it reads and writes.
    generation: u64,
}

impl StateStore {
    /// The store of the query whose checkpoint directory is `location`.
    pub fn open(stores: &Stores, location: &str) -> Result<Self> {
        let query = location.trim_end_matches('/').rsplit('/').next();
        Ok(StateStore {
            storage: stores.open(location)?,
            query: query.unwrap_or_default().to_string(),
            generation: 0,
        })
    }

    /// The same query's files in state generation `generation`.
    pub fn in_generation(&self, generation: u64) -> Self {
        StateStore {
            generation,
            ..self.clone()
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn identity(&self, operator: &str, partition: u32, file: StateFile) -> identity::Identity {
        identity::Identity {
            query: self.query.clone(),
            operator: self.operator_dir(operator),
            partition,
            file: file.name(),
        }
    }

    /// An operator's directory of the store's generation, under `state/`.
    fn operator_dir(&self, operator: &str) -> String {
        match self.generation {
            0 => operator.to_string(),
            g => format!("{operator}/g{g}"),
        }
    }

    /// The shuffle file of writer `writer` of stage `stage`: a map task
    /// (stage 0), or a reduce task of operator `stage - 1`.
    fn shuffle(batch: u64, stage: u32, writer: u32) -> Path {
        let name = match stage {
            0 => format!("{writer:05}.arrow"),
            s => format!("{s}-{writer:05}.arrow"),
        };
        Path::from_iter([SHUFFLE_DIR, &padded(batch), &name])
    }

    fn dir(&self, operator: &str, partition: u32) -> Path {
        let dir = self.operator_dir(operator);
        let mut path = Path::from(STATE_DIR);
        for part in dir.split('/') {
            path = path.join(part);
        }
        path.join(format!("{partition:05}"))
    }

    /// Creates the shuffle file of writer `writer` of stage `stage` (see
    /// [`Self::shuffle`]) of batch `batch`; an existing file with other
    /// bytes is damage (a task is deterministic).
    pub async fn write_shuffle(
        &self,
        batch: u64,
        (stage, writer): (u32, u32),
        bytes: Bytes,
    ) -> Result<()> {
        self.create_same(&Self::shuffle(batch, stage, writer), bytes)
            .await
    }

    /// One bucket of a shuffle file.
    pub async fn read_shuffle(
        &self,
        batch: u64,
        (stage, writer): (u32, u32),
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        let path = Self::shuffle(batch, stage, writer);
        self.storage
            .get_range(path.as_ref(), offset..offset + len)
            .await
    }

    /// Deletes batch `batch`'s shuffle files (after `commits/N`).
    pub async fn remove_shuffle(&self, batch: u64) -> Result<usize> {
        let dir = Path::from_iter([SHUFFLE_DIR, &padded(batch)]);
        let files = self.storage.list_files(&dir).await?;
        for f in &files {
            self.storage.delete(&f.location).await?;
        }
        Ok(files.len())
    }

    /// The batches that still have shuffle files.
    pub async fn shuffled_batches(&self) -> Result<Vec<u64>> {
        let dirs = self.storage.list_dirs(&Path::from(SHUFFLE_DIR)).await?;
        Ok(dirs.iter().filter_map(|d| d.parse().ok()).collect())
    }

    /// Creates a state file; an existing file with other bytes is damage.
    pub async fn write(
        &self,
        operator: &str,
        partition: u32,
        file: StateFile,
        bytes: Bytes,
    ) -> Result<()> {
        let path = self.dir(operator, partition).join(file.name());
        let header = identity::header(&self.identity(operator, partition, file), &bytes)?;
        self.create_same_parts(&path, [header, bytes]).await
    }

    /// A state file's rows, once its identity and checksum are checked
    /// (see [`identity`]).
    pub async fn read(&self, operator: &str, partition: u32, file: StateFile) -> Result<Bytes> {
        let path = self.dir(operator, partition).join(file.name());
        let bytes = self
            .storage
            .get(&path)
            .await?
            .ok_or_else(|| Error::Corrupt {
                path: self.storage.describe(&path),
                reason: "missing".into(),
            })?;
        let id = self.identity(operator, partition, file);
        identity::unwrap(&id, bytes, &self.storage.describe(&path))
    }

    /// A partition's state files; a name that is not one is damage.
    pub async fn files(&self, operator: &str, partition: u32) -> Result<Vec<StateFile>> {
        let dir = self.dir(operator, partition);
        let mut out = Vec::new();
        for f in self.storage.list_files(&dir).await? {
            let name = f.location.filename().unwrap_or_default();
            out.push(StateFile::parse(name).ok_or_else(|| Error::Corrupt {
                path: self.storage.describe(&f.location),
                reason: "not a state file (expected <20-digit version>.delta or .snapshot)".into(),
            })?);
        }
        out.sort();
        Ok(out)
    }

    /// The partitions that have state files, by number.
    pub async fn partitions(&self, operator: &str) -> Result<Vec<u32>> {
        let dir = self.dir(operator, 0);
        let dir = Path::from_iter(dir.parts().take(dir.parts().count() - 1));
        let dirs = self.storage.list_dirs(&dir).await?;
        Ok(dirs.iter().filter_map(|d| d.parse().ok()).collect())
    }

    /// Deletes what [`expired`] allows for one partition.
    pub async fn retain(&self, operator: &str, partition: u32, oldest: u64) -> Result<usize> {
        let files = self.files(operator, partition).await?;
        let gone = expired(&files, oldest);
        for f in &gone {
            let path = self.dir(operator, partition).join(f.name());
            self.storage.delete(&path).await?;
        }
        Ok(gone.len())
    }

    /// After [`Self::retain`]: deletes every file of `operator` in the
    /// generations before this store's once none of them is needed (see
    /// [`standalone`]; `rescale` is how this generation began). Returns
    /// how many files went.
    pub async fn retain_generations(
        &self,
        operator: &str,
        rescale: &Rescale,
        oldest: u64,
    ) -> Result<usize> {
        let mut files = Vec::new();
        for p in 0..rescale.partitions {
            files.push(self.files(operator, p).await?);
        }
        if self.generation == 0 || !standalone(&files, rescale.state_version, oldest) {
            return Ok(0);
        }
        let mut removed = 0;
        for g in 0..self.generation {
            let old = self.in_generation(g);
            for p in old.partitions(operator).await? {
                for f in old.files(operator, p).await? {
                    old.storage
                        .delete(&old.dir(operator, p).join(f.name()))
                        .await?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    /// A human-readable location of a state file, for errors.
    pub fn describe(&self, operator: &str, partition: u32, file: StateFile) -> String {
        self.storage
            .describe(&self.dir(operator, partition).join(file.name()))
    }

    async fn create_same(&self, path: &Path, bytes: Bytes) -> Result<()> {
        self.create_same_parts(path, [bytes]).await
    }

    /// [`Self::create_same`] of the bytes of `parts`, one after the other.
    async fn create_same_parts<const N: usize>(
        &self,
        path: &Path,
        parts: [Bytes; N],
    ) -> Result<()> {
        let same = |b: &Bytes| {
            let mut rest = &b[..];
            parts.iter().all(|p| match rest.strip_prefix(&p[..]) {
                Some(after) => {
                    rest = after;
                    true
                }
                None => false,
            }) && rest.is_empty()
        };
        match self.storage.create_parts(path, &parts).await? {
            Created::New => Ok(()),
            Created::Existing(b) if same(&b) => Ok(()),
            Created::Existing(_) => Err(Error::Corrupt {
                path: self.storage.describe(path),
                reason: "exists with other bytes than this deterministic task wrote".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StateFile::{Delta, Snapshot};

    #[tokio::test]
    async fn a_state_file_is_its_header_and_rows_and_a_retry_must_write_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("q1").display().to_string();
        let store = StateStore::open(&Stores::default(), &location).unwrap();
        let rows = Bytes::from_static(b"the rows of a delta");
        store.write("agg", 3, Delta(7), rows.clone()).await.unwrap();
        let path = walkdir(dir.path())
            .into_iter()
            .find(|p| p.ends_with(Delta(7).name()))
            .expect("the delta's file");
        let on_disk = std::fs::read(&path).unwrap();
        let header = identity::header(&store.identity("agg", 3, Delta(7)), &rows).unwrap();
        assert_eq!(on_disk, [&header[..], &rows[..]].concat());
        assert_eq!(store.read("agg", 3, Delta(7)).await.unwrap(), rows);
        // A retried task writes the same bytes: accepted.
        store.write("agg", 3, Delta(7), rows.clone()).await.unwrap();
        // Other rows, or rows that only begin the same, are damage.
        for other in [
            &b"other rows of a delta"[..],
            &b"the rows of a"[..],
            &b"the rows of a delta!"[..],
        ] {
            let e = store
                .write("agg", 3, Delta(7), Bytes::copy_from_slice(other))
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("exists with other bytes"), "{e}");
        }
    }

    /// The files under `dir`, at any depth.
    fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => files.extend(walkdir(&path)),
                false => files.push(path),
            }
        }
        files
    }

    #[test]
    fn a_version_is_its_latest_snapshot_and_the_deltas_after_it() {
        let files = [
            Delta(0),
            Delta(1),
            Delta(2),
            Snapshot(2),
            Delta(3),
            Delta(4),
        ];
        assert_eq!(
            rebuild(&files, 4),
            Ok(vec![Snapshot(2), Delta(3), Delta(4)])
        );
        assert_eq!(rebuild(&files, 1), Ok(vec![Delta(0), Delta(1)]));
        assert_eq!(rebuild(&files, 2), Ok(vec![Snapshot(2)]));
        let gap = [Delta(0), Delta(2)];
        assert_eq!(
            rebuild(&gap, 2),
            Err("00000000000000000001.delta is missing".into())
        );
    }

    #[test]
    fn retention_keeps_what_rebuilds_the_oldest_version() {
        let files = [
            Delta(0),
            Delta(1),
            Snapshot(1),
            Delta(2),
            Delta(3),
            Snapshot(3),
            Delta(4),
        ];
        assert_eq!(expired(&files, 2), vec![Delta(0), Delta(1)]);
        assert_eq!(
            expired(&files, 4),
            vec![Delta(0), Delta(1), Snapshot(1), Delta(2), Delta(3)]
        );
        assert!(expired(&files, 0).is_empty());
        for oldest in 0..=4 {
            let left: Vec<StateFile> = files
                .iter()
                .copied()
                .filter(|f| !expired(&files, oldest).contains(f))
                .collect();
            for v in oldest..=4 {
                assert!(
                    rebuild(&left, v).is_ok(),
                    "version {v} after retaining {oldest}"
                );
            }
        }
    }

    #[test]
    fn a_generation_stands_alone_once_each_partition_has_a_snapshot_of_its_own() {
        let started = vec![vec![Snapshot(5), Delta(6)], vec![Snapshot(5)]];
        assert!(standalone(&started, Some(5), 6));
        assert!(!standalone(&started, Some(5), 4), "version 4 is older");
        let one_missing = vec![vec![Snapshot(5), Delta(6)], vec![Delta(6)]];
        assert!(!standalone(&one_missing, Some(5), 6));
        assert!(standalone(&[vec![Delta(0)]], None, 0), "it began empty");
    }

    #[test]
    fn a_chain_of_rescales_without_a_batch_between_is_rebuilt_from_where_the_batch_committed() {
        let r = |generation, state_version, previous_partitions, partitions| Rescale {
            generation,
            state_version,
            previous_partitions,
            partitions,
        };
        // 4 → 1 → 1024 → 3 → 1024 → 2 → 5, all after batch 7.
        let chain: Vec<Rescale> = [4, 1, 1024, 3, 1024, 2, 5]
            .windows(2)
            .zip(1..)
            .map(|(w, g)| r(g, Some(7), w[0], w[1]))
            .collect();
        let source = |g| rebuild_source(&chain, g);
        for g in 1..=6 {
            let want = RebuildSource {
                generation: 0,
                partitions: 4,
            };
            assert_eq!(source(g), Ok(want), "generation {g}");
        }
        // Batches 8 and 9 committed in generation 2: generation 3 begins
        // from it, and generation 4, restarted at once, too.
        let mixed = [
            r(1, Some(7), 4, 1),
            r(2, Some(7), 1, 64),
            r(3, Some(9), 64, 3),
            r(4, Some(9), 3, 2),
        ];
        let from_2 = RebuildSource {
            generation: 2,
            partitions: 64,
        };
        assert_eq!(rebuild_source(&mixed, 3), Ok(from_2));
        assert_eq!(rebuild_source(&mixed, 4), Ok(from_2));
        assert_eq!(
            rebuild_source(&mixed, 2),
            Ok(RebuildSource {
                generation: 0,
                partitions: 4
            })
        );
        let gap = [r(1, Some(7), 4, 1), r(3, Some(7), 2, 5)];
        assert_eq!(
            rebuild_source(&gap, 3),
            Err("state generation 2 without the rescale that began it".into())
        );
        assert!(rebuild_source(&gap, 4).is_err(), "no rescale began it");
    }

    #[test]
    fn state_file_names_round_trip() {
        for f in [Delta(7), Snapshot(123)] {
            assert_eq!(StateFile::parse(&f.name()), Some(f));
        }
        assert_eq!(StateFile::parse("7.delta"), None);
        assert_eq!(StateFile::parse("00000000000000000007.tmp"), None);
    }
}
