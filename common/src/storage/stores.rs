//! Opening storage roots: [`Stores`] turns a location into a [`Storage`],
//! building one client per object store bucket and sharing it (with its
//! connection pool) between every root in that bucket.
//!
//! ```text
//!  "/data/ckpt"         ──► LocalFileSystem at /data/ckpt (fsync on)
//!  "s3://bucket/ckpt"   ──► AmazonS3 for s3://bucket ──► PrefixStore "ckpt"
//!  "gs://…", "az://…"   ──► the same path, with the GCS or Azure builder
//! ```
//!
//! GCS and Azure are built only with the `gcs` and `azure` features; without
//! them, opening such a root fails naming the feature to build with.
//!
//! Object store settings come from [`StoreOptions`]: the process
//! environment's `AWS_*`, `GOOGLE_*` and `AZURE_*` variables in the
//! binaries (the AWS conventions: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ALLOW_HTTP`, `AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`), or
//! explicit pairs in tests. Every request has a deadline, and the client's
//! own retries are short: a store that stays down surfaces as a retryable
//! storage error, which the caller retries with backoff while the query
//! shows it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
#[cfg(feature = "azure")]
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
#[cfg(feature = "gcs")]
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use super::counted::{Counted, Counters, RequestCounts};
use super::location::Location;
use super::{Kind, Storage};
use crate::error::{Error, Result};

/// The environment variable prefixes that configure object stores.
const PREFIXES: [&str; 3] = ["AWS_", "GOOGLE_", "AZURE_"];
/// The longest a single request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings for object store clients, as lower-case `object_store` keys
/// (`aws_access_key_id`, `aws_region`, `aws_endpoint_url`, ...).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoreOptions {
    pairs: Vec<(String, String)>,
}

/// Shows the keys only: values may be secrets.
impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.pairs.iter().map(|(k, _)| k))
            .finish()
    }
}

impl StoreOptions {
    /// The `AWS_*`, `GOOGLE_*` and `AZURE_*` variables of this process.
    pub fn from_env() -> Self {
        Self::from_pairs(
            std::env::vars().filter(|(k, _)| PREFIXES.iter().any(|p| k.starts_with(p))),
        )
    }

    /// Settings from `(key, value)` pairs; keys are case-insensitive
    /// (`AWS_REGION` and `aws_region` are the same).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        StoreOptions {
            pairs: pairs
                .into_iter()
                .map(|(k, v)| (k.into().to_ascii_lowercase(), v.into()))
                .collect(),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Opens storage roots; clones share the object store clients.
#[derive(Debug, Clone, Default)]
pub struct Stores {
    options: Arc<StoreOptions>,
    /// One client per `scheme://bucket`.
    clients: Arc<Mutex<HashMap<String, Arc<dyn ObjectStore>>>>,
    /// The requests every root opened here has made.
    counters: Arc<Counters>,
}

/// Equal when configured alike; the clients are a cache.
impl PartialEq for Stores {
    fn eq(&self, other: &Self) -> bool {
        self.options == other.options
    }
}

impl Eq for Stores {}

impl Stores {
    pub fn new(options: StoreOptions) -> Self {
        Stores {
            options: Arc::new(options),
            clients: Arc::default(),
            counters: Arc::default(),
        }
    }

    /// The requests made so far through every root opened here.
    pub fn requests(&self) -> RequestCounts {
        self.counters.snapshot()
    }

    /// Opens the root at `location`. A local root is created when missing;
    /// an object store root needs nothing to exist (see [`Storage::probe`]).
    /// Blocking for a local root (it may create directories).
    pub fn open(&self, location: &str) -> Result<Storage> {
        match Location::parse(location).map_err(Error::Config)? {
            Location::Local(dir) => open_local(dir, &self.counters),
            loc @ Location::Object { .. } => {
                let bucket_url = loc.bucket_url().expect("an object location");
                let Location::Object { prefix, .. } = &loc else {
                    unreachable!("matched above")
                };
                let client = self.client(&loc, &bucket_url)?;
                let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
                    client
                } else {
                    Arc::new(PrefixStore::new(client, prefix.as_str()))
                };
                Ok(Storage {
                    store,
                    display: location.trim_end_matches('/').to_string(),
                    kind: Kind::Object,
                })
            }
        }
    }

    fn client(&self, loc: &Location, bucket_url: &str) -> Result<Arc<dyn ObjectStore>> {
        let mut clients = self.clients.lock().expect("store clients lock poisoned");
        if let Some(c) = clients.get(bucket_url) {
            return Ok(c.clone());
        }
        let client = build(loc, bucket_url, &self.options)?;
        let client: Arc<dyn ObjectStore> = Arc::new(Counted::new(client, self.counters.clone()));
        clients.insert(bucket_url.to_string(), client.clone());
        Ok(client)
    }
}

fn open_local(dir: std::path::PathBuf, counters: &Arc<Counters>) -> Result<Storage> {
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
        store: Arc::new(Counted::new(Arc::new(fs), counters.clone())),
        display: dir.display().to_string(),
        kind: Kind::Local { root: dir },
    })
}

/// The client for one bucket: every key of `options` the scheme's builder
/// knows is applied; the others belong to other schemes.
fn build(loc: &Location, bucket_url: &str, options: &StoreOptions) -> Result<Arc<dyn ObjectStore>> {
    install_crypto_provider();
    let client = ClientOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(CONNECT_TIMEOUT);
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
    };
    let failed = |e: object_store::Error| Error::Config(format!("{bucket_url}: {e}"));
    let Location::Object { scheme, .. } = loc else {
        unreachable!("only object locations have clients")
    };
    let store: Arc<dyn ObjectStore> = match scheme.as_str() {
        "s3" => {
            if options.get("aws_region").is_none() && options.get("aws_default_region").is_none() {
                return Err(Error::Config(format!(
                    "{bucket_url}: no region: set AWS_REGION (or AWS_DEFAULT_REGION)"
                )));
            }
            let mut b = AmazonS3Builder::new()
                .with_client_options(client)
                .with_retry(retry)
                .with_url(bucket_url);
            for (k, v) in &options.pairs {
                if let Ok(key) = k.parse::<AmazonS3ConfigKey>() {
                    b = b.with_config(key, v);
                }
            }
            Arc::new(b.build().map_err(failed)?)
        }
        #[cfg(feature = "gcs")]
        "gs" => {
            let mut b = GoogleCloudStorageBuilder::new()
                .with_client_options(client)
                .with_retry(retry)
                .with_url(bucket_url);
            for (k, v) in &options.pairs {
                if let Ok(key) = k.parse::<GoogleConfigKey>() {
                    b = b.with_config(key, v);
                }
            }
            Arc::new(b.build().map_err(failed)?)
        }
        #[cfg(feature = "azure")]
        "az" => {
            let mut b = MicrosoftAzureBuilder::new()
                .with_client_options(client)
                .with_retry(retry)
                .with_url(bucket_url);
            for (k, v) in &options.pairs {
                if let Ok(key) = k.parse::<AzureConfigKey>() {
                    b = b.with_config(key, v);
                }
            }
            Arc::new(b.build().map_err(failed)?)
        }
        #[cfg(not(feature = "gcs"))]
        "gs" => return Err(not_built(bucket_url, "Google Cloud Storage", "gcs")),
        #[cfg(not(feature = "azure"))]
        "az" => return Err(not_built(bucket_url, "Azure Blob Storage", "azure")),
        other => unreachable!("Location::parse accepted scheme {other}"),
    };
    Ok(store)
}

/// Makes ring the process's rustls crypto provider unless one is installed:
/// the object stores' HTTP client (reqwest, built without a provider of its
/// own) takes its TLS crypto from there.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Only a provider installed by another thread since the check makes
        // this fail, and every provider Sluice installs is ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The error for a root whose object store this build leaves out.
#[cfg_attr(all(feature = "gcs", feature = "azure"), allow(dead_code))]
fn not_built(bucket_url: &str, store: &str, feature: &str) -> Error {
    Error::Config(format!(
        "{bucket_url}: this sluice is built without {store}; build it with \
         `cargo build --release --features {feature}`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "gcs"))]
    #[test]
    fn a_store_left_out_of_the_build_is_named() {
        let err = Stores::default().open("gs://bucket/x").unwrap_err();
        assert!(err.to_string().contains("--features gcs"), "{err}");
        assert!(err.to_string().contains("gs://bucket"), "{err}");
        assert!(!err.is_retryable());
    }

    #[test]
    fn an_s3_location_needs_a_region() {
        let none = Stores::default().open("s3://bucket/x").unwrap_err();
        assert!(none.to_string().contains("AWS_REGION"), "{none}");
        assert!(!none.is_retryable());
        let with = Stores::new(StoreOptions::from_pairs([("AWS_REGION", "eu-west-1")]));
        let s = with.open("s3://bucket/x/").unwrap();
        assert_eq!(s.describe(&"a/b".into()), "s3://bucket/x/a/b");
    }

    #[test]
    fn roots_in_one_bucket_share_a_client() {
        let stores = Stores::new(StoreOptions::from_pairs([("aws_region", "r")]));
        stores.open("s3://b/one").unwrap();
        stores.open("s3://b/two").unwrap();
        stores.open("s3://c").unwrap();
        assert_eq!(stores.clients.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn requests_are_counted_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let stores = Stores::default();
        let s = stores.open(dir.path().to_str().unwrap()).unwrap();
        let before = stores.requests();
        let p = super::super::Path::from("x");
        s.create(&p, bytes::Bytes::from("1")).await.unwrap();
        s.create(&p, bytes::Bytes::from("1")).await.unwrap();
        s.size(&p).await.unwrap();
        s.list_files(&super::super::Path::from("")).await.unwrap();
        let n = stores.requests().since(&before);
        assert_eq!((n.put, n.get, n.head, n.list), (2, 1, 1, 1), "{n:?}");
    }
}
