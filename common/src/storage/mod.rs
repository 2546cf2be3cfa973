//! Storage for checkpoints and sinks, through `object_store`.
//!
//! A location is an absolute path or a `file://` URL (a local or shared
//! filesystem: NFS, a ReadWriteMany volume), or an object store prefix
//! (`s3://bucket/prefix`, `gs://`, `az://`); see [`Location`] and
//! [`Stores`]; [`AllowedPaths`] confines the locations a query may name
//! to an operator's prefixes. Writes are durable before they return: on a
//! filesystem `LocalFileSystem::with_fsync(true)` syncs the file and its
//! directory; an object store acknowledges a put once it is durable.
//!
//! Invariant (docs/design-notes.md, 3): every file is written atomically and
//! create-only. [`Storage::create`] never replaces a file; when the name is
//! taken it returns the existing bytes so that the caller can adopt them.
//! On an object store it is a conditional put (`If-None-Match: *`), which
//! the store refuses with 412 when the key exists; nothing is renamed.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, Result};
use failure::{Refusal, refusal};

mod allowed;
mod counted;
pub(crate) mod failure;
mod location;
mod read;
mod stores;
mod visible;
pub use allowed::{AllowedPaths, overlap_resolved};
pub use counted::RequestCounts;
pub(crate) use location::normalize;
pub use location::{Location, check_sink_location, locations_overlap, validate_location};
pub use object_store::path::Path;
pub use read::FileMeta;
pub use stores::{StoreOptions, Stores};
pub use visible::{Visible, VisibleWriter};

/// The outcome of a create-only write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// This call wrote the file.
    New,
    /// The file already existed; these are its bytes.
    Existing(Bytes),
}

/// A storage root with create-only, durable writes. Opened by
/// [`Stores::open`].
#[derive(Clone, Debug)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    display: String,
    kind: Kind,
}

/// What is behind a root.
#[derive(Clone, Debug)]
enum Kind {
    /// A directory on the local (or shared) filesystem.
    Local { root: std::path::PathBuf },
    /// A prefix in an object store bucket: puts are atomic, create-only
    /// puts are conditional (`If-None-Match: *`), and nothing is renamed.
    Object,
}

impl Storage {
    /// True for an object store root.
    pub fn is_object_store(&self) -> bool {
        matches!(self.kind, Kind::Object)
    }

    /// Checks that the root can be used at all, so that a mistake fails at
    /// start: for an object store, one LIST under the root. A missing
    /// bucket or credentials the store refuses are configuration errors
    /// that name the location; a store that does not answer is a
    /// retryable storage error.
    pub async fn probe(&self) -> Result<()> {
        if !self.is_object_store() {
            return Ok(());
        }
        let e = match self.store.list_with_delimiter(None).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let refused = match &e {
            object_store::Error::NotFound { .. } => Some(Refusal::NoBucket),
            e => refusal(e),
        };
        match refused {
            Some(Refusal::NoBucket) => Err(Error::Config(format!(
                "{}: the bucket does not exist ({e})",
                self.display
            ))),
            Some(Refusal::Denied) => Err(Error::Config(format!(
                "{}: access denied; check the credentials (AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY, or the service account's role): {e}",
                self.display
            ))),
            None => Err(Error::storage(&self.display, e)),
        }
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
        // Nothing hidden is ever written to an object store: puts are
        // atomic, and an unfinished multipart upload is no object.
        let Kind::Local { root } = &self.kind else {
            return Ok(0);
        };
        let root = root.clone();
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
        self.create_parts(path, &[bytes]).await
    }

    /// [`Self::create`] of the bytes of `parts`, one after the other, as
    /// one file; the parts are written as they are, not copied into one.
    pub async fn create_parts(&self, path: &Path, parts: &[Bytes]) -> Result<Created> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let payload: PutPayload = parts.iter().cloned().collect();
        match self.store.put_opts(path, payload, opts).await {
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
        let s = Stores::default()
            .open(dir.path().to_str().unwrap())
            .unwrap();
        std::fs::write(dir.path().join("blocker"), "a file").unwrap();
        let err = s
            .create(&Path::from("blocker/x"), Bytes::from("one"))
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("blocker"), "{err}");
    }

    #[tokio::test]
    async fn create_is_create_only_and_adopts() {
        let dir = tempfile::tempdir().unwrap();
        let s = Stores::default()
            .open(dir.path().to_str().unwrap())
            .unwrap();
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
}
