//! Storage for checkpoints and sinks, through `object_store`.
//!
//! A location is an absolute path or a `file://` URL: a local or shared
//! filesystem (NFS, a ReadWriteMany volume). Writes are durable before they
//! return (`LocalFileSystem::with_fsync(true)` syncs the file and its
//! directory).
//!
//! Invariant (DESIGN.md, 3): every file is written atomically and
//! create-only. [`Storage::create`] never replaces a file; when the name is
//! taken it returns the existing bytes so that the caller can adopt them.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, Result};

pub(crate) mod failure;
mod read;
mod visible;
pub use object_store::path::Path;
pub use read::{FileMeta, check_input_dir, locate_input};
pub use visible::{Visible, VisibleWriter};

/// The outcome of a create-only write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// This call wrote the file.
    New,
    /// The file already existed; these are its bytes.
    Existing(Bytes),
}

/// A storage root with create-only, durable writes.
#[derive(Clone, Debug)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    display: String,
    /// The root directory on the local (or shared) filesystem.
    root: std::path::PathBuf,
}

/// Checks that `location` is an absolute path or a `file://` URL.
pub fn validate_location(location: &str) -> std::result::Result<(), String> {
    local_path(location).map(|_| ())
}

/// Whether two locations overlap: one is the other or lies inside it.
/// `.` and `..` are resolved lexically first (symbolic links are not
/// followed). A location that is not a local path overlaps nothing.
pub fn locations_overlap(a: &str, b: &str) -> bool {
    match (local_path(a), local_path(b)) {
        (Ok(a), Ok(b)) => {
            let (a, b) = (normalize(&a), normalize(&b));
            a.starts_with(&b) || b.starts_with(&a)
        }
        _ => false,
    }
}

/// Filesystems no sink may write to.
const VIRTUAL_ROOTS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// What can be known before any write that a sink at `location` can never
/// work: it lies on a virtual filesystem, or it (or a directory above it)
/// exists and is not a directory. Reads metadata only.
pub fn check_sink_location(location: &str) -> std::result::Result<(), String> {
    let path = normalize(&local_path(location)?);
    if let Some(root) = VIRTUAL_ROOTS.iter().find(|r| path.starts_with(r)) {
        return Err(format!(
            "{} is under {root}, a virtual filesystem",
            path.display()
        ));
    }
    let mut at = Some(path.as_path());
    while let Some(p) = at {
        if let Ok(meta) = std::fs::metadata(p) {
            if !meta.is_dir() {
                return Err(format!("{} exists and is not a directory", p.display()));
            }
            return Ok(());
        }
        at = p.parent();
    }
    Ok(())
}

/// `path` with `.` dropped and each `..` taking away the component before it.
fn normalize(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn local_path(location: &str) -> std::result::Result<std::path::PathBuf, String> {
    let path = match location.strip_prefix("file://") {
        Some(rest) => rest,
        None if location.contains("://") => {
            return Err(format!(
                "unsupported location {location:?}: use an absolute path or a file:// URL"
            ));
        }
        None => location,
    };
    let p = std::path::PathBuf::from(path);
    if !p.is_absolute() {
        return Err(format!("{location:?} is not an absolute path"));
    }
    Ok(p)
}

impl Storage {
    /// Opens (and creates when missing) the root at `location`.
    pub fn open(location: &str) -> Result<Self> {
        let dir = local_path(location).map_err(Error::Config)?;
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::storage(
                dir.display(),
                object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: Box::new(e),
                },
            )
        })?;
        let fs = LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| Error::storage(dir.display(), e))?
            .with_fsync(true);
        Ok(Storage {
            store: Arc::new(fs),
            display: dir.display().to_string(),
            root: dir.clone(),
        })
    }

    /// A human-readable name for `path` under this root, for errors.
    pub fn describe(&self, path: &Path) -> String {
        format!("{}/{}", self.display.trim_end_matches('/'), path)
    }

    /// Reads a file, or `None` when it does not exist.
    pub async fn get(&self, path: &Path) -> Result<Option<Bytes>> {
        match self.store.get(path).await {
            Ok(r) => Ok(Some(
                r.bytes()
                    .await
                    .map_err(|e| Error::storage(self.describe(path), e))?,
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::storage(self.describe(path), e)),
        }
    }

    /// Removes the hidden files (names starting with `.`) under the root,
    /// in it and in its subdirectories (a sink's partition directories),
    /// for which `remove` says yes, including the staging files of
    /// unfinished uploads (`<name>#N`), which listings through
    /// object_store do not show. Returns how many were removed; a file
    /// that is already gone is not an error.
    pub async fn remove_hidden(
        &self,
        remove: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<usize> {
        let root = self.root.clone();
        let describe = self.display.clone();
        let fail = move |e: std::io::Error| {
            Error::storage(
                &describe,
                object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: Box::new(e),
                },
            )
        };
        tokio::task::spawn_blocking(move || {
            let mut removed = 0;
            let mut dirs = vec![root];
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(&dir).map_err(&fail)? {
                    let entry = entry.map_err(&fail)?;
                    let name = entry.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if !name.starts_with('.') && entry.file_type().map_err(&fail)?.is_dir() {
                        dirs.push(entry.path());
                        continue;
                    }
                    if !name.starts_with('.') || !remove(name) {
                        continue;
                    }
                    match std::fs::remove_file(entry.path()) {
                        Ok(()) => removed += 1,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(fail(e)),
                    }
                }
            }
            Ok(removed)
        })
        .await
        .expect("the removal of hidden files panicked")
    }

    /// The size of `path`, or `None` when it does not exist.
    pub async fn size(&self, path: &Path) -> Result<Option<u64>> {
        match self.store.head(path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::storage(self.describe(path), e)),
        }
    }

    /// True when `path` exists.
    pub async fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.size(path).await?.is_some())
    }

    /// Writes `bytes` to `path` atomically, only if `path` does not exist.
    pub async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes), opts)
            .await
        {
            Ok(_) => Ok(Created::New),
            Err(object_store::Error::AlreadyExists { .. }) => self.adopt(path).await,
            Err(e) => Err(Error::storage(self.describe(path), e)),
        }
    }

    async fn adopt(&self, path: &Path) -> Result<Created> {
        match self.get(path).await? {
            Some(b) => Ok(Created::Existing(b)),
            None => Err(Error::Corrupt {
                path: self.describe(path),
                reason: "reported as existing but cannot be read".into(),
            }),
        }
    }

    /// Lists the files directly under `prefix`, in lexical order. Names that
    /// start with `.` (temporary files) are skipped.
    pub async fn list_files(&self, prefix: &Path) -> Result<Vec<ObjectMeta>> {
        let res = self
            .store
            .list_with_delimiter(Some(prefix))
            .await
            .map_err(|e| Error::storage(self.describe(prefix), e))?;
        let mut files: Vec<ObjectMeta> = res
            .objects
            .into_iter()
            .filter(|m| !m.location.filename().unwrap_or(".").starts_with('.'))
            .collect();
        files.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(files)
    }

    /// Lists the names of the directories directly under `prefix`.
    pub async fn list_dirs(&self, prefix: &Path) -> Result<Vec<String>> {
        let res = self
            .store
            .list_with_delimiter(Some(prefix))
            .await
            .map_err(|e| Error::storage(self.describe(prefix), e))?;
        let mut dirs: Vec<String> = res
            .common_prefixes
            .into_iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        dirs.sort();
        Ok(dirs)
    }

    /// Lists every file below `prefix`, recursively.
    pub async fn list_recursive(&self, prefix: &Path) -> Result<Vec<ObjectMeta>> {
        self.store
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(|e| Error::storage(self.describe(prefix), e))
    }

    /// Deletes a file; a missing file is not an error.
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::storage(self.describe(path), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writing_under_a_file_is_a_permanent_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path().to_str().unwrap()).unwrap();
        std::fs::write(dir.path().join("blocker"), "a file").unwrap();
        let err = s
            .create(&Path::from("blocker/x"), Bytes::from("one"))
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("blocker"), "{err}");
    }

    #[test]
    fn sinks_that_can_never_work_are_known_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let at = |p: &std::path::Path| check_sink_location(p.to_str().unwrap());
        assert!(at(&file).unwrap_err().contains("not a directory"));
        assert!(at(&file.join("below")).unwrap_err().contains("file"));
        assert!(at(&dir.path().join("new/deeper")).is_ok());
        assert!(at(dir.path()).is_ok());
        let proc = check_sink_location("/proc/self/out").unwrap_err();
        assert!(proc.contains("/proc"), "{proc}");
        assert!(
            check_sink_location("/x/../sys/y")
                .unwrap_err()
                .contains("/sys")
        );
    }

    #[test]
    fn overlap_is_by_whole_components_after_normalizing() {
        assert!(locations_overlap("/data/out", "/data/out"));
        assert!(locations_overlap("/data/out/", "file:///data/out"));
        assert!(locations_overlap("/data/out/a", "/data/out"));
        assert!(locations_overlap("/data", "/data/out/a"));
        assert!(locations_overlap("/data/x/../out/./a", "/data/out"));
        assert!(locations_overlap("/data/out/../../data/out", "/data/out/b"));
        assert!(!locations_overlap("/data/out", "/data/out-2"));
        assert!(!locations_overlap("/data/out/../out-2", "/data/out"));
        assert!(!locations_overlap("/a", "/b"));
        assert!(!locations_overlap("s3://bucket/x", "s3://bucket/x"));
    }

    #[tokio::test]
    async fn create_is_create_only_and_adopts() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path().to_str().unwrap()).unwrap();
        let p = Path::from("a/b/x");
        assert_eq!(
            s.create(&p, Bytes::from("one")).await.unwrap(),
            Created::New
        );
        assert_eq!(
            s.create(&p, Bytes::from("two")).await.unwrap(),
            Created::Existing(Bytes::from("one"))
        );
    }

    #[test]
    fn locations_must_be_absolute() {
        assert!(validate_location("/a/b").is_ok());
        assert!(validate_location("file:///a/b").is_ok());
        assert!(validate_location("a/b").is_err());
        assert!(validate_location("s3://bucket/x").is_err());
    }
}
