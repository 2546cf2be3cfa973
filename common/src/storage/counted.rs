//! Counting the requests a store serves, by kind, for `sluice-bench`'s
//! "requests per batch" and for operators comparing backends. Every client
//! that [`super::Stores`] opens is wrapped; the counts are shared by every
//! root opened through one `Stores`.
//!
//! On an object store each counted call is one HTTP request, except a
//! multipart upload (create, one PUT per part, complete) and a LIST that
//! pages (one call here, a request per 1000 keys).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// Requests served so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    pub put: u64,
    pub get: u64,
    pub head: u64,
    pub list: u64,
    pub delete: u64,
    /// Multipart uploads started.
    pub multipart: u64,
    /// Copies and renames (a filesystem's create-only rename).
    pub copy: u64,
}

impl RequestCounts {
    /// The requests between `earlier` and `self`.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            put: self.put - earlier.put,
            get: self.get - earlier.get,
            head: self.head - earlier.head,
            list: self.list - earlier.list,
            delete: self.delete - earlier.delete,
            multipart: self.multipart - earlier.multipart,
            copy: self.copy - earlier.copy,
        }
    }
}

/// The live counters behind [`RequestCounts`].
#[derive(Debug, Default)]
pub struct Counters {
    put: AtomicU64,
    get: AtomicU64,
    head: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    multipart: AtomicU64,
    copy: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self) -> RequestCounts {
        let v = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            put: v(&self.put),
            get: v(&self.get),
            head: v(&self.head),
            list: v(&self.list),
            delete: v(&self.delete),
            multipart: v(&self.multipart),
            copy: v(&self.copy),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A store that counts the calls it passes on.
#[derive(Debug)]
pub struct Counted {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<Counters>,
}

impl Counted {
    pub fn new(inner: Arc<dyn ObjectStore>, counters: Arc<Counters>) -> Self {
        Counted { inner, counters }
    }
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counted({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        bump(&self.counters.put);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        bump(&self.counters.multipart);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        bump(if options.head {
            &self.counters.head
        } else {
            &self.counters.get
        });
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        bump(&self.counters.get);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counters = self.counters.clone();
        let counted = locations.inspect(move |_| bump(&counters.delete)).boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        bump(&self.counters.list);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        bump(&self.counters.list);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        bump(&self.counters.list);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        bump(&self.counters.copy);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        bump(&self.counters.copy);
        self.inner.rename_opts(from, to, options).await
    }
}
