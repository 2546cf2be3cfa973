//! The file sink: its part files, and its manifests (see [`manifest`] for
//! their format and compaction, [`log`] for how they are stored).
//!
//! ```text
//! <path>/[<col>=<value>/...]part-<batch:020>-<partition:05>[-<seq:04>].<ext>
//!                                                one file of a task's rows
//! <path>/_sluice/<batch:020>                     the batch's manifest
//! <path>/_sluice/<batch:020>.compact             a segment: the manifests of the batches
//!                                                after the previous one, up to batch
//! <path>/.../.<name>.<uuid>.tmp                  in-flight writes (skipped by readers)
//! ```
//!
//! A task writes one file per output partition directory (`partition_by`),
//! and starts a new one (`seq` 1, 2, ...) when a file reaches the sink's
//! size limit.
//!
//! A part file is written under a temporary name and renamed into place
//! only if its name is free. A retried task writes identical bytes, so a
//! name that is taken is adopted when its bytes match; a mismatch is a
//! [`Error::Conflict`] and is never overwritten.

use crate::storage::Path;
use bytes::Bytes;

use crate::checkpoint::padded;
use crate::error::{Error, Result};
use crate::storage::{Storage, Stores, Visible, VisibleWriter};

pub mod delta;
pub mod delta_compact;
pub mod delta_log;
pub mod delta_table;
pub mod iceberg;
mod jsonl;
mod log;
pub mod manifest;
pub mod parquet;

pub use jsonl::encode_jsonl;
pub use log::{decode_compact, decode_delta, read_delta};
pub use manifest::{
    COMPACT_INTERVAL, CompactManifest, MANIFEST_DIR, ManifestName, SinkFile, SinkManifest,
};

/// The directory name of a null partition value (`col=<this>/`), as Hive
/// and Spark write it.
pub const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// A storage root in a new temporary directory, for unit tests.
#[cfg(test)]
pub(crate) fn temp_storage() -> (tempfile::TempDir, Storage) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let storage = crate::storage::Stores::default()
        .open(dir.path().to_str().expect("a UTF-8 temporary path"))
        .expect("storage in a temporary directory");
    (dir, storage)
}

/// The path of a part file in format `ext`, relative to the sink root:
/// under `dir` (a Hive-style partition directory, or empty), file `seq`
/// of the task (0 has no suffix).
pub fn part_name(dir: &str, batch: u64, partition: u32, seq: u32, ext: &str) -> String {
    let dir = if dir.is_empty() {
        String::new()
    } else {
        format!("{}/", dir.trim_end_matches('/'))
    };
    let seq = if seq == 0 {
        String::new()
    } else {
        format!("-{seq:04}")
    };
    format!("{dir}part-{}-{partition:05}{seq}.{ext}", padded(batch))
}

/// The batch of a temporary part file, `.part-<batch>-<partition>.jsonl.
/// <uuid>.tmp` (with `#N` while an upload is unfinished); `None` for any
/// other name.
pub fn temp_batch(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(".part-")?;
    if !rest.contains(".tmp") {
        return None;
    }
    rest.get(..20)?.parse().ok()
}

/// The batch of a part file's name (see [`part_name`]); `None` for any
/// other name.
pub fn part_batch(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("part-")?;
    if rest.as_bytes().get(20) != Some(&b'-') {
        return None;
    }
    crate::checkpoint::parse_padded(rest.get(..20)?)
}

/// A file sink rooted at one directory.
#[derive(Clone, Debug)]
pub struct FileSink {
    storage: Storage,
}

impl FileSink {
    pub fn open(stores: &Stores, location: &str) -> Result<Self> {
        Ok(FileSink {
            storage: stores.open(location)?,
        })
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Writes one task's part file from one buffer, create-only: the
    /// chunked writer ([`FileSink::begin_part`]) with a single chunk.
    pub async fn write_part(
        &self,
        batch: u64,
        partition: u32,
        rows: u64,
        data: Vec<u8>,
    ) -> Result<SinkFile> {
        let name = part_name("", batch, partition, 0, "jsonl");
        let mut writer = self.begin_part(&name).await?;
        writer.write(Bytes::from(data)).await?;
        self.finish_part(writer, &name, rows).await
    }

    /// Removes the temporary files that failed, cancelled or killed
    /// attempts left behind: those of batches up to `upto`, or all of them
    /// when `upto` is `None` (the query has ended). Returns how many.
    pub async fn purge_temp(&self, upto: Option<u64>) -> Result<usize> {
        self.storage
            .remove_hidden(move |name| match temp_batch(name) {
                Some(batch) => upto.is_none_or(|u| batch <= u),
                None => false,
            })
            .await
    }

    /// Starts writing the part file `name` (see [`part_name`]) in chunks
    /// (see [`VisibleWriter`]); [`FileSink::finish_part`] makes it visible.
    pub async fn begin_part(&self, name: &str) -> Result<VisibleWriter> {
        self.storage.begin_visible(&Path::from(name)).await
    }

    /// Makes a part file visible, create-only: a file already there with
    /// the same bytes is adopted, with other bytes it is a conflict.
    pub async fn finish_part(
        &self,
        writer: VisibleWriter,
        name: &str,
        rows: u64,
    ) -> Result<SinkFile> {
        let bytes = match writer.finish().await? {
            Visible::New { bytes } | Visible::Identical { bytes } => bytes,
            Visible::Different => {
                return Err(Error::Conflict {
                    path: self.storage.describe(&Path::from(name)),
                });
            }
        };
        Ok(SinkFile {
            path: name.to_string(),
            rows,
            bytes,
        })
    }

    /// Checks that every file in `files` exists with the size its writer
    /// reported, all at once. A missing or different file is
    /// [`Error::Corrupt`], naming it: a manifest never lists a file that
    /// readers would not find as described.
    pub async fn check_files(&self, files: &[SinkFile]) -> Result<()> {
        let checks = files.iter().map(|f| async move {
            let path = Path::from(f.path.as_str());
            let found = self.storage.size(&path).await?;
            if found == Some(f.bytes) {
                return Ok(());
            }
            Err(Error::Corrupt {
                path: self.storage.describe(&path),
                reason: match found {
                    None => format!("reported written ({} bytes) but missing", f.bytes),
                    Some(n) => format!("reported as {} bytes but has {n}", f.bytes),
                },
            })
        });
        futures::future::try_join_all(checks).await.map(|_| ())
    }

    /// Writes the manifest of a batch, or adopts the one already there.
    pub async fn write_manifest(&self, manifest: &SinkManifest) -> Result<SinkManifest> {
        log::write_delta(&self.storage, manifest).await
    }

    /// After `last`, the stored manifest of its batch: writes the batch's
    /// compacted manifest when it is one that compacts every `interval`
    /// batches (create-only, adopted when a replay finds it written): the
    /// segment of the deltas since the previous one, read by name. Returns
    /// whether the batch compacts.
    pub async fn write_compact(&self, last: &SinkManifest, interval: u64) -> Result<bool> {
        log::write_compact(&self.storage, last, interval).await
    }

    /// Every committed batch's manifest, in batch order: every segment's
    /// entries, then the deltas after the latest (every delta of a sink
    /// without one). Lists `_sluice/` once, and again if a purge deleted a
    /// file it listed.
    pub async fn manifests(&self) -> Result<Vec<SinkManifest>> {
        log::read(&self.storage).await
    }

    /// After batch `committed`: deletes the deltas readers no longer need,
    /// those a segment lists, except those of the last `retain` batches.
    /// Returns how many.
    pub async fn purge_manifests(&self, committed: u64, retain: u64) -> Result<usize> {
        log::purge(&self.storage, committed, retain).await
    }

    /// For a query that stopped before it committed `batch`: claims the
    /// batch's manifest, create-only, as abandoned (see
    /// [`SinkManifest::abandon`]) and removes the batch's part files. A
    /// real manifest already there (the batch's commit wrote it first)
    /// keeps the batch, files and all. Returns how many files were removed.
    pub async fn abandon(&self, batch: u64, epoch: u64) -> Result<usize> {
        let stored = log::write_delta(&self.storage, &SinkManifest::abandon(batch, epoch)).await?;
        if !stored.abandoned {
            return Ok(0);
        }
        let doomed: Vec<Path> = self
            .storage
            .list_recursive(&Path::from(""))
            .await?
            .into_iter()
            .map(|meta| meta.location)
            .filter(|p| p.filename().and_then(part_batch) == Some(batch))
            .collect();
        for p in &doomed {
            self.storage.delete(p).await?;
        }
        Ok(doomed.len())
    }

    /// For a stopped query that runs again: lets `batch`, which it
    /// abandoned when it stopped, commit after all (its abandoned manifest
    /// is removed). Returns the batch's real manifest if its commit had
    /// written one before the stop.
    pub async fn reopen(&self, batch: u64) -> Result<Option<SinkManifest>> {
        log::reopen(&self.storage, batch).await
    }

    /// A sink manifest for `batch` listing `files`, with `version` set.
    pub fn manifest(batch: u64, epoch: u64, files: Vec<SinkFile>) -> SinkManifest {
        SinkManifest::new(batch, epoch, files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn part_files_are_create_only_and_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let rows = crate::rate::generate(0, 2, 10, 0, 0, 10).unwrap();
        let data = encode_jsonl(&rows).unwrap();
        let text = String::from_utf8(data.clone()).unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            r#"{"value":0,"timestamp_ms":0}"#
        );
        let f = sink.write_part(3, 0, 5, data.clone()).await.unwrap();
        assert_eq!(f.path, "part-00000000000000000003-00000.jsonl");
        // An identical retry is adopted; different bytes are refused.
        sink.write_part(3, 0, 5, data).await.unwrap();
        let err = sink
            .write_part(3, 0, 1, b"{}\n".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }));
    }

    #[tokio::test]
    async fn temporary_files_of_finished_batches_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let names = [
            ".part-00000000000000000003-00001.jsonl.0a1b.tmp",
            ".part-00000000000000000004-00000.jsonl.0a1c.tmp#1",
            ".part-00000000000000000009-00000.jsonl.0a1d.tmp",
            ".keep-me",
            "part-00000000000000000003-00001.jsonl",
        ];
        for n in names {
            std::fs::write(dir.path().join(n), "x").unwrap();
        }
        assert_eq!(temp_batch(names[1]), Some(4));
        assert_eq!(temp_batch(names[3]), None);
        assert_eq!(part_batch(names[4]), Some(3));
        assert_eq!(
            part_batch("part-00000000000000000003-0001-x.jsonl"),
            Some(3)
        );
        for other in [names[0], "part-0000000000000000003-00001.jsonl", "part-x"] {
            assert_eq!(part_batch(other), None, "{other}");
        }
        assert_eq!(sink.purge_temp(Some(4)).await.unwrap(), 2);
        assert_eq!(sink.purge_temp(None).await.unwrap(), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".keep-me", "part-00000000000000000003-00001.jsonl"]);
    }

    #[tokio::test]
    async fn an_abandoned_batch_loses_its_part_files_unless_its_manifest_won() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let committed = sink.write_part(3, 0, 1, b"{}\n".to_vec()).await.unwrap();
        sink.write_manifest(&FileSink::manifest(3, 1, vec![committed]))
            .await
            .unwrap();
        sink.write_part(4, 0, 1, b"{}\n".to_vec()).await.unwrap();
        std::fs::create_dir(dir.path().join("day=1")).unwrap();
        std::fs::write(
            dir.path()
                .join("day=1/part-00000000000000000004-00001.jsonl"),
            "x",
        )
        .unwrap();
        // Batch 3's manifest was written first: the claim loses.
        assert_eq!(sink.abandon(3, 2).await.unwrap(), 0);
        assert_eq!(sink.abandon(4, 2).await.unwrap(), 2);
        assert!(
            !dir.path()
                .join("day=1/part-00000000000000000004-00001.jsonl")
                .exists()
        );
        assert!(
            dir.path()
                .join("part-00000000000000000003-00000.jsonl")
                .exists()
        );
        // Readers skip the abandoned batch; a late manifest of it loses.
        let read = sink.manifests().await.unwrap();
        assert_eq!(read.iter().map(|m| m.batch_id).collect::<Vec<_>>(), [3]);
        let late = sink
            .write_manifest(&FileSink::manifest(4, 1, Vec::new()))
            .await
            .unwrap();
        assert!(late.abandoned);
    }

    #[tokio::test]
    async fn reported_files_are_checked_against_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
        let f = sink.write_part(1, 0, 1, b"{}\n".to_vec()).await.unwrap();
        sink.check_files(std::slice::from_ref(&f)).await.unwrap();
        let wrong = SinkFile {
            bytes: 9,
            ..f.clone()
        };
        let err = sink.check_files(&[f.clone(), wrong]).await.unwrap_err();
        assert!(
            err.to_string().contains("reported as 9 bytes but has 3"),
            "{err}"
        );
        let gone = SinkFile {
            path: "part-x.jsonl".into(),
            ..f
        };
        let err = sink.check_files(&[gone]).await.unwrap_err();
        assert!(err.to_string().contains("part-x.jsonl"), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
