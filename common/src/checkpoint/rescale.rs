//! `rescales/<G>`: the restarts of a stopped query with other state
//! partitions. Restart G begins state generation G (generation 0 is the
//! one the query was submitted with), whose files live apart from the
//! earlier ones (see [`crate::state`]): a generation's partition P at the
//! version the restart started from is the rows of every partition of the
//! generation before whose key the shuffle now routes to P.

use serde::{Deserialize, Serialize};

use super::{Log, QueryCheckpoint, Record};
use crate::error::{Error, Result};
use crate::state::Rescale;

/// One restart with other state partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescaleRecord {
    pub version: u32,
    /// The state generation it begins, from 1.
    pub generation: u64,
    /// The last batch committed before it, whose state the new generation
    /// starts from; `None`: no batch had committed.
    pub state_version: Option<u64>,
    /// The state partitions before and after.
    pub previous_partitions: u32,
    pub partitions: u32,
    /// The epoch of the driver that restarted the query, and when.
    pub epoch: u64,
    pub rescaled_ms: i64,
}

impl RescaleRecord {
    /// What a reduce task needs of it to rebuild the new generation.
    pub fn rescale(&self) -> Rescale {
        Rescale {
            generation: self.generation,
            state_version: self.state_version,
            previous_partitions: self.previous_partitions,
            partitions: self.partitions,
        }
    }
}

impl QueryCheckpoint {
    /// Every rescale of the query, by generation. A gap in the generations
    /// is damage, named.
    pub async fn rescales(&self) -> Result<Vec<RescaleRecord>> {
        let mut out: Vec<RescaleRecord> = Vec::new();
        for g in self.batches(Log::Rescales).await? {
            let record: RescaleRecord = self.require_entry(Log::Rescales, g).await?;
            if record.generation != g || g != out.len() as u64 + 1 {
                return Err(Error::Corrupt {
                    path: self.describe_entry(Log::Rescales, g),
                    reason: format!(
                        "generation {} where generation {} was expected",
                        record.generation,
                        out.len() + 1
                    ),
                });
            }
            out.push(record);
        }
        Ok(out)
    }

    /// Creates `rescales/<G>` for `record`'s generation, or adopts the one
    /// there.
    pub async fn write_rescale(&self, record: &RescaleRecord) -> Result<(RescaleRecord, bool)> {
        self.create_entry(Log::Rescales, record.generation, record)
            .await
    }

    /// Removes the stop marker of a stopped query that is restarted.
    pub async fn clear_stopped(&self) -> Result<()> {
        self.storage
            .delete(&self.path(&self.rel(Record::Stopped)))
            .await
    }
}
