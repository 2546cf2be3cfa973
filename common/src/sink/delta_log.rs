//! A Delta table's log on storage (see [`super::delta`] for its format):
//! its commits listed, where a query stands in it found by reading them
//! back from the newest, and a commit made only where its version is free.
//!
//! A query's commits carry its id as their `txn` app id, so the newest
//! commit that has one says the last batch the query put in the table,
//! whoever committed after it. The walk reads one commit when the query
//! committed last, and every JSON commit when it never committed.

use bytes::Bytes;

use super::delta::{LOG_DIR, commit_name, txn_version, version_of};
use super::delta_table::{Protocol, TableMeta, metadata_of, protocol_of};
use crate::error::{Error, Result};
use crate::storage::{Created, Path, Storage};

/// Where a query stands in a table's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    /// The newest commit's version; `None`: there is no table yet.
    pub latest: Option<u64>,
    /// The query's last batch in the table (its newest `txn` version);
    /// `None`: the query never committed to it.
    pub batch: Option<u64>,
}

/// What a commit found at its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// The commit is the table's version now.
    Made,
    /// Another commit holds the version: its bytes.
    Taken(Bytes),
}

/// The versions of the table's commits (the log's JSON files), ascending;
/// empty when there is no table.
pub async fn versions(storage: &Storage) -> Result<Vec<u64>> {
    let files = storage.list_files(&Path::from(LOG_DIR)).await?;
    let mut versions: Vec<u64> = files
        .iter()
        .filter_map(|m| m.location.filename().and_then(version_of))
        .collect();
    versions.sort_unstable();
    Ok(versions)
}

/// Commit `version` of the table's log, and its name for errors. A
/// commit the log lists that cannot be read is corrupt.
pub async fn read_commit(storage: &Storage, version: u64) -> Result<(Bytes, String)> {
    let path = Path::from(commit_name(version));
    let what = storage.describe(&path);
    match storage.get(&path).await? {
        Some(bytes) => Ok((bytes, what)),
        None => Err(Error::Corrupt {
            path: what,
            reason: "a commit listed in the log cannot be read".into(),
        }),
    }
}

/// Where query `app_id` stands in the table's log.
pub async fn standing(storage: &Storage, app_id: &str) -> Result<Standing> {
    let versions = versions(storage).await?;
    let latest = versions.last().copied();
    for &version in versions.iter().rev() {
        let (bytes, what) = read_commit(storage, version).await?;
        if let Some(batch) = txn_version(&bytes, app_id, &what)? {
            return Ok(Standing {
                latest,
                batch: Some(batch),
            });
        }
    }
    match versions.first() {
        // Commits before the first were folded into a checkpoint, which
        // may hold the query's txn.
        Some(&first) if first > 0 => Err(folded(storage, first)),
        _ => Ok(Standing {
            latest,
            batch: None,
        }),
    }
}

/// What the table's log says of it now (its newest `metaData` and its
/// newest `protocol`); `None` when there is no table.
pub async fn table_meta(storage: &Storage) -> Result<Option<(TableMeta, Protocol)>> {
    let versions = versions(storage).await?;
    let (mut meta, mut protocol) = (None, None);
    for &version in versions.iter().rev() {
        let (bytes, what) = read_commit(storage, version).await?;
        if meta.is_none() {
            meta = metadata_of(&bytes, &what)?;
        }
        if protocol.is_none() {
            protocol = protocol_of(&bytes, &what)?;
        }
        if let (Some(meta), Some(protocol)) = (&meta, &protocol) {
            return Ok(Some((meta.clone(), protocol.clone())));
        }
    }
    match versions.first() {
        Some(&first) if first > 0 => Err(folded(storage, first)),
        Some(_) => Err(Error::Corrupt {
            path: storage.describe(&Path::from(commit_name(0))),
            reason: "the table's first commit has no metaData or no protocol".into(),
        }),
        None => Ok(None),
    }
}

/// The error of a log whose commits before `first` were folded into a
/// checkpoint.
fn folded(storage: &Storage, first: u64) -> Error {
    Error::Config(format!(
        "the Delta table's log {} begins at version {first}: its earlier commits are \
         only in a checkpoint, which Sluice does not read",
        storage.describe(&Path::from(LOG_DIR))
    ))
}

/// Commits `bytes` as the table's version `version`, only if no commit
/// holds it (a conditional put: two writers racing on a version are
/// settled by the store).
pub async fn commit(storage: &Storage, version: u64, bytes: impl Into<Bytes>) -> Result<Committed> {
    match storage
        .create(&Path::from(commit_name(version)), bytes.into())
        .await?
    {
        Created::New => Ok(Committed::Made),
        Created::Existing(held) => Ok(Committed::Taken(held)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::delta::{AddFile, Commit};
    use super::*;

    use crate::sink::temp_storage as open;

    fn bytes_of(app_id: &str, batch: u64) -> Bytes {
        let files = [AddFile {
            path: format!("part-{batch}.parquet"),
            partition_values: vec![],
            size: 10,
            modification_time_ms: 1,
            num_records: 1,
        }];
        let c = Commit {
            created: None,
            files: &files,
            app_id,
            batch,
            now_ms: 1,
        };
        Bytes::from(c.encode())
    }

    #[tokio::test]
    async fn a_query_stands_at_its_newest_txn_whoever_committed_after_it() {
        let (dir, storage) = open();
        assert_eq!(standing(&storage, "q").await.unwrap(), Standing::default());
        let log = dir.path().join(LOG_DIR);
        for (version, app, batch) in [(0, "q", 0), (1, "q", 1), (2, "other", 7)] {
            let made = commit(&storage, version, bytes_of(app, batch))
                .await
                .unwrap();
            assert_eq!(made, Committed::Made);
        }
        // The log's other files are not commits.
        std::fs::write(log.join("00000000000000000002.crc"), b"{}").unwrap();
        std::fs::write(log.join("_last_checkpoint"), b"{}").unwrap();
        assert_eq!(versions(&storage).await.unwrap(), [0, 1, 2]);
        let at = standing(&storage, "q").await.unwrap();
        assert_eq!(
            at,
            Standing {
                latest: Some(2),
                batch: Some(1)
            }
        );
        let never = standing(&storage, "new").await.unwrap();
        assert_eq!((never.latest, never.batch), (Some(2), None));
    }

    #[tokio::test]
    async fn a_version_taken_is_never_overwritten_and_its_commit_is_returned() {
        let (_dir, storage) = open();
        let first = bytes_of("q", 0);
        commit(&storage, 0, first.clone()).await.unwrap();
        let raced = commit(&storage, 0, bytes_of("other", 3)).await.unwrap();
        assert_eq!(raced, Committed::Taken(first.clone()));
        let held = storage.get(&Path::from(commit_name(0))).await.unwrap();
        assert_eq!(held, Some(first));
    }

    #[tokio::test]
    async fn a_log_folded_into_a_checkpoint_is_refused_rather_than_misread() {
        let (_dir, storage) = open();
        commit(&storage, 5, bytes_of("other", 1)).await.unwrap();
        let err = standing(&storage, "q").await.unwrap_err().to_string();
        assert!(
            err.contains("begins at version 5") && err.contains("checkpoint"),
            "{err}"
        );
        // A txn after the checkpoint needs nothing before it.
        commit(&storage, 6, bytes_of("q", 4)).await.unwrap();
        let at = standing(&storage, "q").await.unwrap();
        assert_eq!(at.batch, Some(4));
    }
}
