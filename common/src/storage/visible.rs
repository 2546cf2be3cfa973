//! Writing a file that arrives in chunks, create-only, visible only when
//! complete, in bounded memory.
//!
//! On a filesystem:
//!
//! ```text
//!  write(chunk) ──► multipart upload of .<name>.<uuid>.tmp   (staging file)
//!  finish() ──────► complete the upload ──► rename_if_not_exists(tmp, name)
//!                      name taken? compare the temporary file with the one
//!                      there (size, then a streamed digest of each), then remove it
//! ```
//!
//! On an object store, where nothing is renamed:
//!
//! ```text
//!  write(chunk) ──► buffer up to one part (5 MiB)
//!                   └─ more? multipart upload of <name> itself
//!  finish() ──────► one part or less: one conditional put (If-None-Match: *)
//!                      412? compare the bytes with the object there
//!                   more: HEAD <name>; taken? abort and compare digests,
//!                         else complete the upload (visible only now)
//! ```
//!
//! A multipart upload's completion is not conditional in `object_store`, so
//! two attempts of one task racing to finish the same large part file can
//! both complete; their bytes are the same (tasks are deterministic, which
//! the small-file path and every retry check), so the object is too.
//!
//! Memory holds the chunk being written and one part, never the whole
//! file. A writer dropped before `finish` (a failed or cancelled task)
//! leaves nothing visible: object_store removes an unfinished upload's
//! staging file when the upload is dropped; an object store keeps the
//! unfinished upload's parts until a lifecycle rule aborts them.

use std::hash::{DefaultHasher, Hasher};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, WriteMultipart};

use tracing::warn;

use super::{Created, Kind, Storage};
use crate::error::{Error, Result};

/// The size of one multipart part: S3's smallest (but for the last).
const PART_BYTES: usize = 5 << 20;
/// Parts in flight at once.
const PARTS_IN_FLIGHT: usize = 2;

/// How a chunked create ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visible {
    /// This writer created the file, of this many bytes.
    New { bytes: u64 },
    /// The file was there with the same bytes (a retried attempt).
    Identical { bytes: u64 },
    /// The file was there with other bytes.
    Different,
}

/// A file being written; see the module docs.
pub struct VisibleWriter {
    storage: Storage,
    path: Path,
    bytes: u64,
    /// Every byte written, for comparing with a file already there.
    digest: DefaultHasher,
    sink: Sink,
}

enum Sink {
    /// A filesystem: a multipart upload of a staging file, renamed at the end.
    Staged { tmp: Path, upload: WriteMultipart },
    /// An object store, up to one part: held in memory.
    Buffered(Vec<Bytes>),
    /// An object store, more than one part: uploading to the name itself.
    Uploading(WriteMultipart),
}

impl Storage {
    /// Starts writing `path` in chunks (see [`VisibleWriter`]).
    pub async fn begin_visible(&self, path: &Path) -> Result<VisibleWriter> {
        let sink = match self.kind {
            Kind::Local { .. } => {
                let tmp = temp_sibling(path);
                let upload = self.multipart(&tmp).await?;
                Sink::Staged { tmp, upload }
            }
            Kind::Object => Sink::Buffered(Vec::new()),
        };
        Ok(VisibleWriter {
            storage: self.clone(),
            path: path.clone(),
            bytes: 0,
            digest: DefaultHasher::new(),
            sink,
        })
    }

    async fn multipart(&self, path: &Path) -> Result<WriteMultipart> {
        let upload = self
            .store
            .put_multipart(path)
            .await
            .map_err(|e| Error::storage(self.describe(path), e))?;
        Ok(WriteMultipart::new_with_chunk_size(upload, PART_BYTES))
    }
}

/// `.<name>.<uuid>.tmp` beside `path`: readers of the directory skip it.
fn temp_sibling(path: &Path) -> Path {
    let name = path.filename().unwrap_or("file");
    let tmp_name = format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple());
    let mut parts: Vec<object_store::path::PathPart<'_>> = path.parts().collect();
    parts.pop();
    parts.push(tmp_name.as_str().into());
    Path::from_iter(parts)
}

impl VisibleWriter {
    /// Appends a chunk; waits while too many parts are in flight.
    pub async fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.digest.write(&chunk);
        self.bytes += chunk.len() as u64;
        let upload = match &mut self.sink {
            Sink::Staged { upload, .. } | Sink::Uploading(upload) => upload,
            Sink::Buffered(held) => {
                held.push(chunk);
                if self.bytes < PART_BYTES as u64 {
                    return Ok(());
                }
                let held = std::mem::take(held);
                let mut upload = self.storage.multipart(&self.path).await?;
                for c in held {
                    upload.put(c);
                }
                self.sink = Sink::Uploading(upload);
                return Ok(());
            }
        };
        let describe = || self.storage.describe(&self.path);
        upload
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| Error::storage(describe(), e))?;
        upload.put(chunk);
        Ok(())
    }

    /// Makes the file visible under its name, or compares it with the file
    /// already there.
    pub async fn finish(self) -> Result<Visible> {
        let VisibleWriter {
            storage,
            path,
            bytes,
            digest,
            sink,
        } = self;
        let ours = (digest.finish(), bytes);
        match sink {
            Sink::Staged { tmp, upload } => storage.finish_staged(&path, tmp, upload, ours).await,
            Sink::Buffered(held) => {
                let all: Vec<u8> = held.iter().flat_map(|c| c.iter().copied()).collect();
                match storage.create(&path, Bytes::from(all)).await? {
                    Created::New => Ok(Visible::New { bytes }),
                    Created::Existing(theirs) => Ok(same(ours, digest_of(&theirs), bytes)),
                }
            }
            Sink::Uploading(upload) => {
                let describe = || storage.describe(&path);
                if storage.size(&path).await?.is_some() {
                    if let Err(e) = upload.abort().await {
                        // Its parts stay until a lifecycle rule aborts them.
                        warn!(
                            path = %describe(),
                            error = %e,
                            "cannot abort the upload of a name already taken"
                        );
                    }
                    return Ok(same(ours, storage.digest(&path).await?, bytes));
                }
                upload
                    .finish()
                    .await
                    .map_err(|e| Error::storage(describe(), e))?;
                Ok(Visible::New { bytes })
            }
        }
    }
}

fn same(ours: (u64, u64), theirs: (u64, u64), bytes: u64) -> Visible {
    if ours == theirs {
        Visible::Identical { bytes }
    } else {
        Visible::Different
    }
}

fn digest_of(bytes: &[u8]) -> (u64, u64) {
    let mut d = DefaultHasher::new();
    d.write(bytes);
    (d.finish(), bytes.len() as u64)
}

impl Storage {
    /// Completes a filesystem upload and renames it into place, or compares
    /// it with the file already there.
    async fn finish_staged(
        &self,
        path: &Path,
        tmp: Path,
        upload: WriteMultipart,
        ours: (u64, u64),
    ) -> Result<Visible> {
        upload
            .finish()
            .await
            .map_err(|e| Error::storage(self.describe(&tmp), e))?;
        let outcome = match self.store.rename_if_not_exists(&tmp, path).await {
            Ok(()) => return Ok(Visible::New { bytes: ours.1 }),
            // Taken (a retried attempt): the same bytes? Only this rare path
            // reads anything back.
            Err(object_store::Error::AlreadyExists { .. }) => self
                .digest(path)
                .await
                .map(|theirs| same(ours, theirs, ours.1)),
            Err(e) => Err(Error::storage(self.describe(path), e)),
        };
        match self.store.delete(&tmp).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            // A hidden leftover: readers skip it and the driver's purge of
            // temporary files removes it.
            Err(e) => warn!(
                path = %self.describe(&tmp),
                error = %e,
                "cannot remove a temporary file"
            ),
        }
        outcome
    }

    /// The digest and size of a file, read as a stream.
    async fn digest(&self, path: &Path) -> Result<(u64, u64)> {
        let fail = |e| Error::storage(self.describe(path), e);
        let mut stream = self.store.get(path).await.map_err(fail)?.into_stream();
        let (mut digest, mut bytes) = (DefaultHasher::new(), 0u64);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(fail)?;
            digest.write(&chunk);
            bytes += chunk.len() as u64;
        }
        Ok((digest.finish(), bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn write(s: &Storage, path: &Path, chunks: &[&str]) -> Visible {
        let mut w = s.begin_visible(path).await.unwrap();
        for c in chunks {
            w.write(Bytes::from(c.to_string())).await.unwrap();
        }
        w.finish().await.unwrap()
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn chunks_become_one_file_create_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = crate::storage::Stores::default()
            .open(dir.path().to_str().unwrap())
            .unwrap();
        let p = Path::from("part-1");
        assert_eq!(
            write(&s, &p, &["ab", "cd"]).await,
            Visible::New { bytes: 4 }
        );
        assert_eq!(std::fs::read(dir.path().join("part-1")).unwrap(), b"abcd");
        // The same bytes in other chunks are identical; other bytes differ.
        assert_eq!(
            write(&s, &p, &["a", "bcd"]).await,
            Visible::Identical { bytes: 4 }
        );
        assert_eq!(write(&s, &p, &["abce"]).await, Visible::Different);
        assert_eq!(write(&s, &p, &["abc"]).await, Visible::Different);
        assert_eq!(std::fs::read(dir.path().join("part-1")).unwrap(), b"abcd");
        assert_eq!(names(dir.path()), ["part-1"], "no temporary file is left");
    }

    #[tokio::test]
    async fn a_dropped_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = crate::storage::Stores::default()
            .open(dir.path().to_str().unwrap())
            .unwrap();
        let mut w = s.begin_visible(&Path::from("part-2")).await.unwrap();
        w.write(Bytes::from(vec![7u8; 6 << 20])).await.unwrap();
        drop(w);
        // The staging file is removed on a blocking thread.
        for _ in 0..100 {
            if names(dir.path()).is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("left behind: {:?}", names(dir.path()));
    }
}
