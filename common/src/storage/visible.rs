//! Writing a file that arrives in chunks, create-only, visible only when
//! complete, in bounded memory:
//!
//! ```text
//!  write(chunk) ──► multipart upload of .<name>.<uuid>.tmp   (staging file)
//!  finish() ──────► complete the upload ──► rename_if_not_exists(tmp, name)
//!                      name taken? compare the temporary file with the one
//!                      there (size, then a streamed digest of each), then remove it
//! ```
//!
//! Memory holds the chunk being written and the upload's buffer, never the
//! whole file. A writer dropped before `finish` (a failed or cancelled
//! task) leaves nothing: object_store removes an unfinished upload's
//! staging file when the upload is dropped.

use std::hash::{DefaultHasher, Hasher};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, WriteMultipart};

use super::Storage;
use crate::error::{Error, Result};

/// The size of one multipart part.
const PART_BYTES: usize = 4 << 20;
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
    tmp: Path,
    upload: WriteMultipart,
    bytes: u64,
}

impl Storage {
    /// Starts writing `path` in chunks (see [`VisibleWriter`]).
    pub async fn begin_visible(&self, path: &Path) -> Result<VisibleWriter> {
        let tmp = temp_sibling(path);
        let upload = self
            .store
            .put_multipart(&tmp)
            .await
            .map_err(|e| Error::storage(self.describe(&tmp), e))?;
        Ok(VisibleWriter {
            storage: self.clone(),
            path: path.clone(),
            tmp,
            upload: WriteMultipart::new_with_chunk_size(upload, PART_BYTES),
            bytes: 0,
        })
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
        self.upload
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| Error::storage(self.storage.describe(&self.tmp), e))?;
        self.bytes += chunk.len() as u64;
        self.upload.put(chunk);
        Ok(())
    }

    /// Completes the upload and makes the file visible under its name, or
    /// compares it with the file already there.
    pub async fn finish(self) -> Result<Visible> {
        let VisibleWriter {
            storage,
            path,
            tmp,
            upload,
            bytes,
        } = self;
        upload
            .finish()
            .await
            .map_err(|e| Error::storage(storage.describe(&tmp), e))?;
        let renamed = storage.store.rename_if_not_exists(&tmp, &path).await;
        let outcome = match renamed {
            Ok(()) => return Ok(Visible::New { bytes }),
            // Taken (a retried attempt): the same bytes? Only this rare path
            // reads anything back.
            Err(object_store::Error::AlreadyExists { .. }) => {
                let ours = storage.digest(&tmp).await;
                let theirs = storage.digest(&path).await;
                match (ours, theirs) {
                    (Ok(ours), Ok(theirs)) if ours == theirs => Ok(Visible::Identical { bytes }),
                    (Ok(_), Ok(_)) => Ok(Visible::Different),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            Err(e) => Err(Error::storage(storage.describe(&path), e)),
        };
        let _ = storage.store.delete(&tmp).await;
        outcome
    }
}

impl Storage {
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
        let s = Storage::open(dir.path().to_str().unwrap()).unwrap();
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
        let s = Storage::open(dir.path().to_str().unwrap()).unwrap();
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
