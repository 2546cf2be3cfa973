//! What a term's leadership offers the rest of the driver: the fence before
//! every write and dispatch, confirmation against the source of truth, and
//! the addresses of the drivers standing by. Nothing outside `leader/`
//! sees how the leadership is held (an etcd lease or an epoch claim file).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use sluice_common::checkpoint::Checkpoint;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::lease::LeaseClock;
use crate::error::DriverError;

/// How long any single etcd request may take.
pub(super) const ETCD_DEADLINE: Duration = Duration::from_secs(2);

/// How one term holds its leadership.
pub struct Leadership(Held);

enum Held {
    /// The epoch is a create-only claim under `<root>/epochs/`.
    Standalone,
    /// The epoch is the revision of the etcd leader key, held by a lease.
    Elected {
        client: Box<Client>,
        name: String,
        lease: Arc<LeaseClock>,
    },
}

impl Leadership {
    pub fn standalone() -> Self {
        Leadership(Held::Standalone)
    }

    pub(super) fn elected(client: Client, name: String, lease: Arc<LeaseClock>) -> Self {
        Leadership(Held::Elected {
            client: Box::new(client),
            name,
            lease,
        })
    }

    /// The lease clock of an elected term: the scheduler checks it before
    /// every dispatch.
    pub fn lease(&self) -> Option<Arc<LeaseClock>> {
        match &self.0 {
            Held::Standalone => None,
            Held::Elected { lease, .. } => Some(lease.clone()),
        }
    }

    /// Fails unless the term of `epoch` may still dispatch and commit: it is
    /// not cancelled and, when elected, its lease was renewed within 2/3 of
    /// the TTL. A stale lease cancels the term at once.
    pub fn fence(&self, epoch: u64, cancel: &CancellationToken) -> Result<(), DriverError> {
        if cancel.is_cancelled() {
            return Err(DriverError::Deposed { epoch });
        }
        if let Some(lease) = self.lease()
            && !lease.fresh()
        {
            if lease.is_resigned() {
                // Handing over: the term ends once the resign is done.
                return Err(DriverError::Deposed { epoch });
            }
            warn!(epoch, "lease renewal overdue; stepping down");
            cancel.cancel();
            return Err(DriverError::Deposed { epoch });
        }
        Ok(())
    }

    /// The epoch that leads now, read from the source of truth: the highest
    /// epoch claim, or the revision of the etcd leader key.
    pub async fn leading_epoch(&self, checkpoint: &Checkpoint) -> Result<u64, DriverError> {
        match &self.0 {
            Held::Standalone => Ok(checkpoint.highest_epoch().await?),
            Held::Elected { client, name, .. } => {
                let mut client = client.as_ref().clone();
                let resp = within(ETCD_DEADLINE, client.leader(name.as_str())).await?;
                Ok(resp.kv().map_or(0, |kv| kv.create_revision() as u64))
            }
        }
    }

    /// The advertised addresses of the other drivers in the election
    /// (none for a standalone driver).
    pub async fn standbys(&self, own: &str) -> Result<Vec<String>, DriverError> {
        let Held::Elected { client, name, .. } = &self.0 else {
            return Ok(Vec::new());
        };
        let mut client = client.as_ref().clone();
        let prefix = format!("{name}/");
        let options = GetOptions::new().with_prefix();
        let resp = within(ETCD_DEADLINE, client.get(prefix.as_str(), Some(options))).await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| kv.value_str().ok())
            .map(|v| super::value::parse_election_value(v).0)
            .filter(|a| a != own)
            .collect())
    }
}

/// Bounds one etcd call and names etcd in its error.
pub(super) async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, DriverError> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r.map_err(etcd_error),
        Err(_) => Err(DriverError::Election(
            format!("etcd did not answer within {limit:?}").into(),
        )),
    }
}

pub(super) fn etcd_error(e: etcd_client::Error) -> DriverError {
    DriverError::Election(Box::new(e))
}
