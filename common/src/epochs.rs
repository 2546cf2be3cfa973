//! Standalone epoch claims: `<root>/epochs/<E>`, create-only.
//!
//! A standalone driver leads by claiming the next epoch, one more than the
//! highest claim so far. The highest claim leads; a driver whose claim is
//! no longer the highest has been deposed. Each claim names its driver and
//! the address it advertises, so that a deposed driver can point clients
//! and executors at its successor.

use crate::storage::Path;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, RECORD_VERSION, decode, encode, padded};
use crate::error::{Error, Result};
use crate::storage::Created;

const DIR: &str = crate::checkpoint::EPOCHS_DIR;

/// The content of `epochs/<E>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochClaim {
    pub version: u32,
    /// The claimant's `--id`.
    pub driver: String,
    /// The claimant's advertised gRPC address (empty in old claims).
    #[serde(default)]
    pub advertise: String,
    pub claimed_ms: i64,
}

/// The epoch after `highest`, or an error naming the claim at the maximum.
fn next_epoch(highest: u64, describe: impl FnOnce() -> String) -> Result<u64> {
    highest.checked_add(1).ok_or_else(|| Error::Corrupt {
        path: describe(),
        reason: format!(
            "the epoch counter is at its maximum ({highest}); no standalone epoch can follow it"
        ),
    })
}

impl Checkpoint {
    /// Claims the next standalone epoch, create-only, so that two drivers
    /// never share one.
    pub async fn claim_epoch(&self, driver: &str, advertise: &str) -> Result<u64> {
        let storage = self.storage();
        loop {
            let highest = self.highest_epoch().await?;
            let epoch = next_epoch(highest, || {
                storage.describe(&Path::from(DIR).join(padded(highest)))
            })?;
            let claim = EpochClaim {
                version: RECORD_VERSION,
                driver: driver.to_string(),
                advertise: advertise.to_string(),
                claimed_ms: crate::time::now_ms(),
            };
            let path = Path::from(DIR).join(padded(epoch));
            // Taken: another driver claimed it first; look again.
            if let Created::New = storage.create(&path, encode(&claim)?).await? {
                return Ok(epoch);
            }
        }
    }

    /// The highest epoch claimed so far (0 when none).
    pub async fn highest_epoch(&self) -> Result<u64> {
        let files = self.storage().list_files(&Path::from(DIR)).await?;
        Ok(files
            .iter()
            .filter_map(|m| m.location.filename()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0))
    }

    /// The claim of `epoch`, if it exists.
    pub async fn epoch_claim(&self, epoch: u64) -> Result<Option<EpochClaim>> {
        let path = Path::from(DIR).join(padded(epoch));
        match self.storage().get(&path).await? {
            None => Ok(None),
            Some(bytes) => decode(&bytes, &self.storage().describe(&path)).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn epochs_only_grow_and_name_their_claimant() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::open(
            &crate::storage::Stores::default(),
            dir.path().to_str().unwrap(),
        )
        .unwrap();
        assert_eq!(cp.claim_epoch("a", "h:1").await.unwrap(), 1);
        assert_eq!(cp.claim_epoch("b", "h:2").await.unwrap(), 2);
        assert_eq!(cp.highest_epoch().await.unwrap(), 2);
        let claim = cp.epoch_claim(2).await.unwrap().unwrap();
        assert_eq!(
            (claim.driver.as_str(), claim.advertise.as_str()),
            ("b", "h:2")
        );
        assert_eq!(cp.epoch_claim(3).await.unwrap(), None);
    }

    #[test]
    fn the_counter_never_wraps() {
        assert_eq!(next_epoch(7, || unreachable!()).unwrap(), 8);
        let err = next_epoch(u64::MAX, || "epochs/18446744073709551615".into()).unwrap_err();
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(text.contains("epochs/18446744073709551615"), "{text}");
        assert!(text.contains("maximum"), "{text}");
    }
}
