//! Settings read from files that an operator may replace while the driver
//! runs: the TLS certificate and key, the client CA, the token file. A
//! Kubernetes Secret is rotated by swapping the files under its mount; the
//! driver notices within [`POLL`] and uses the new files for the next
//! connection or call, with no restart.
//!
//! ```text
//!  every POLL: read the files ── same bytes ──► keep
//!                   │ changed
//!                   ▼
//!              load() ── ok ──► swap in, log
//!                   └── error ──► keep the old, warn, try again next POLL
//! ```
//!
//! A half-written rotation (a new certificate beside the old key) fails to
//! load and is retried, so the driver never serves a broken pair.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sluice_common::small_file::{self, Limits};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::DriverError;

/// How often the files are compared with what was loaded.
pub const POLL: Duration = Duration::from_secs(1);

type Loader<T> = Box<dyn Fn() -> Result<T, DriverError> + Send + Sync>;
/// The bytes of each file as last loaded (`None`: unreadable).
type Seen = Vec<Option<Vec<u8>>>;

/// A value loaded from `files`, reloaded when their bytes change.
pub struct Watched<T> {
    what: &'static str,
    files: Vec<PathBuf>,
    load: Loader<T>,
    current: RwLock<(Seen, Arc<T>)>,
}

impl<T: Send + Sync + 'static> Watched<T> {
    /// Loads the value once; an error here stops the driver at start.
    pub fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        load: impl Fn() -> Result<T, DriverError> + Send + Sync + 'static,
    ) -> Result<Arc<Self>, DriverError> {
        let seen = read_all(&files);
        let value = load()?;
        Ok(Arc::new(Watched {
            what,
            files,
            load: Box::new(load),
            current: RwLock::new((seen, Arc::new(value))),
        }))
    }

    /// The value in use now.
    pub fn get(&self) -> Arc<T> {
        self.current.read().expect("reload lock poisoned").1.clone()
    }

    /// Reloads when the files changed; true when a new value was swapped in.
    pub fn poll(&self) -> bool {
        let seen = read_all(&self.files);
        if self.current.read().expect("reload lock poisoned").0 == seen {
            return false;
        }
        match (self.load)() {
            Ok(value) => {
                *self.current.write().expect("reload lock poisoned") = (seen, Arc::new(value));
                info!(what = self.what, files = ?self.files, "reloaded");
                true
            }
            Err(e) => {
                warn!(what = self.what, error = %e, "files changed but do not load; keeping the ones in use");
                false
            }
        }
    }
}

/// Something [`watch`] polls.
pub trait Poll: Send + Sync {
    fn poll(&self) -> bool;
}

impl<T: Send + Sync + 'static> Poll for Watched<T> {
    fn poll(&self) -> bool {
        Watched::poll(self)
    }
}

/// Polls every watched value until `cancel`.
pub async fn watch(
    items: Vec<Arc<dyn Poll>>,
    cancel: CancellationToken,
) -> Result<(), DriverError> {
    if items.is_empty() {
        cancel.cancelled().await;
        return Ok(());
    }
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(()),
            _ = tick.tick() => {
                for item in &items {
                    item.poll();
                }
            }
        }
    }
}

/// Each file's bytes; `None` for one that cannot be read, or is not a
/// regular file of at most [`Limits::DOCUMENT`] (a rotation that swaps in
/// a named pipe or a device neither blocks nor fills the driver).
fn read_all(files: &[PathBuf]) -> Seen {
    files
        .iter()
        .map(|f| small_file::read(f, Limits::DOCUMENT).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloads_on_change_and_keeps_the_old_on_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("n");
        std::fs::write(&f, "1").unwrap();
        let path = f.clone();
        let w = Watched::new("number", vec![f.clone()], move || {
            std::fs::read_to_string(&path)?
                .trim()
                .parse::<u32>()
                .map_err(|e| DriverError::Config(e.to_string()))
        })
        .unwrap();
        assert_eq!(*w.get(), 1);
        assert!(!w.poll());
        std::fs::write(&f, "2").unwrap();
        assert!(w.poll());
        assert_eq!(*w.get(), 2);
        std::fs::write(&f, "not a number").unwrap();
        assert!(!w.poll());
        assert_eq!(*w.get(), 2);
        std::fs::write(&f, "3").unwrap();
        assert!(w.poll());
        assert_eq!(*w.get(), 3);
    }
}
