//! Reading input files: listing a source directory with sizes and
//! modification times, and reading byte ranges. Used for source files and
//! static tables, which Sluice only ever reads.

use std::ops::Range;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{Location, Path, Storage};
use crate::error::{Error, Result};

/// A file under a storage root, as a listing or a `head` saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// The path under the root, `/`-separated.
    pub path: String,
    pub size: u64,
    /// The modification time, in milliseconds since the Unix epoch.
    pub modified_ms: i64,
}

impl Storage {
    /// The files directly under the root, in name order, without those
    /// whose name starts with `.` or `_` (hidden, temporary or metadata
    /// files, as Spark skips them).
    pub async fn list_inputs(&self) -> Result<Vec<FileMeta>> {
        let res = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(|e| Error::storage(&self.display, e))?;
        let mut files: Vec<FileMeta> = res
            .objects
            .into_iter()
            .filter(|m| {
                let name = m.location.filename().unwrap_or(".");
                !name.starts_with('.') && !name.starts_with('_')
            })
            .map(|m| FileMeta {
                path: m.location.to_string(),
                size: m.size,
                modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// The size and modification time of `path`, or `None` when it does
    /// not exist.
    pub async fn head(&self, path: &str) -> Result<Option<FileMeta>> {
        let p = Path::from(path);
        match self.store.head(&p).await {
            Ok(m) => Ok(Some(FileMeta {
                path: path.to_string(),
                size: m.size,
                modified_ms: m.last_modified.timestamp_millis(),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::storage(self.describe(&p), e)),
        }
    }

    /// The bytes `range` of `path`.
    pub async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes> {
        let p = Path::from(path);
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        self.store
            .get_range(&p, range)
            .await
            .map_err(|e| Error::storage(self.describe(&p), e))
    }

    /// A human-readable name for `path` (a `/`-separated string) under
    /// this root, for errors.
    pub fn describe_str(&self, path: &str) -> String {
        self.describe(&Path::from(path))
    }
}

impl super::Stores {
    /// Checks that the input directory `location` can be read. A local
    /// directory must exist: a source that names none is a mistake, not an
    /// empty stream. An object store prefix needs no object under it (a
    /// prefix with no files is an empty directory), only a bucket that can
    /// be listed.
    pub async fn check_input_dir(&self, location: &str) -> std::result::Result<(), String> {
        match Location::parse(location)? {
            Location::Local(path) => match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => Err(format!("{} is not a directory", path.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Err(format!("{} does not exist", path.display()))
                }
                Err(e) => Err(format!("{}: {e}", path.display())),
            },
            Location::Object { .. } => {
                let storage = self.open(location).map_err(|e| e.to_string())?;
                storage.probe().await.map_err(|e| e.to_string())
            }
        }
    }

    /// Where the files of an input that is one file or a directory are: the
    /// directory, and the file's name when it is one file. On an object
    /// store, a key that exists is a file, and anything else a prefix.
    pub async fn locate_input(
        &self,
        location: &str,
    ) -> std::result::Result<(String, Option<String>), String> {
        match Location::parse(location)? {
            Location::Local(path) => match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => Ok((path.display().to_string(), None)),
                Ok(_) => {
                    let dir = path.parent().ok_or("a file at the filesystem root")?;
                    let name = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .ok_or_else(|| format!("{} has no UTF-8 file name", path.display()))?;
                    Ok((dir.display().to_string(), Some(name.to_string())))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Err(format!("{} does not exist", path.display()))
                }
                Err(e) => Err(format!("{}: {e}", path.display())),
            },
            Location::Object { ref prefix, .. } => {
                let location = location.trim_end_matches('/');
                if let Some((dir, name)) = location.rsplit_once('/')
                    && !prefix.is_empty()
                {
                    let parent = self.open(dir).map_err(|e| e.to_string())?;
                    parent.probe().await.map_err(|e| e.to_string())?;
                    if parent
                        .head(name)
                        .await
                        .map_err(|e| e.to_string())?
                        .is_some()
                    {
                        return Ok((dir.to_string(), Some(name.to_string())));
                    }
                }
                let storage = self.open(location).map_err(|e| e.to_string())?;
                storage.probe().await.map_err(|e| e.to_string())?;
                Ok((location.to_string(), None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::Stores;

    /// A named pipe or a device among a source's files is listed as a file
    /// of 0 bytes, and what a task reads of it (its whole size) comes back
    /// at once: nothing opens it, so nothing blocks on it or reads it
    /// without end. Empty files are in no task (`driver/src/source/split.rs`).
    #[tokio::test]
    async fn pipes_and_devices_in_an_input_directory_are_empty_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jsonl"), "{\"v\":1}\n").unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero")).unwrap();
        let storage = Stores::default()
            .open(dir.path().to_str().unwrap())
            .unwrap();
        let started = Instant::now();
        let listed: Vec<(String, u64)> = storage
            .list_inputs()
            .await
            .unwrap()
            .into_iter()
            .map(|f| (f.path, f.size))
            .collect();
        assert_eq!(
            listed,
            [
                ("a.jsonl".into(), 8),
                ("fifo".into(), 0),
                ("zero".into(), 0)
            ]
        );
        for (path, size) in &listed {
            let read = storage.get_range(path, 0..*size).await.unwrap();
            assert_eq!(read.len() as u64, *size);
        }
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
