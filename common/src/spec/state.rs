//! The spec's fields for stateful queries: the output mode, the state's
//! partitions, how often it is snapshotted, how large it may grow and how
//! long an idle key stays.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The buckets of a stateful query's shuffle and state, unless set.
pub const DEFAULT_STATE_PARTITIONS: u32 = 8;
pub const MAX_STATE_PARTITIONS: u32 = 1024;
/// A state snapshot every this many batches, unless set.
pub const DEFAULT_SNAPSHOT_INTERVAL: u64 = 10;
pub const MAX_SNAPSHOT_INTERVAL: u64 = 10_000;
/// The most bytes of a query's state, over all its partitions, unless set.
pub const DEFAULT_MAX_STATE_BYTES: u64 = 1 << 30;
/// The longest `state_ttl_ms`: ten years (of 365 days).
pub const MAX_STATE_TTL_MS: u64 = 10 * 365 * 86_400_000;

/// Which rows each batch emits, with Spark's semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Rows that are final: a stateless query's rows, a window once the
    /// watermark passes its end.
    Append,
    /// The groups that changed in the batch.
    Update,
    /// The whole result table, every batch.
    Complete,
}

impl OutputMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "append" => Some(OutputMode::Append),
            "update" => Some(OutputMode::Update),
            "complete" => Some(OutputMode::Complete),
            _ => None,
        }
    }

    /// The mode as tasks are told it.
    pub fn to_proto(self) -> sluice_proto::OutputMode {
        match self {
            OutputMode::Append => sluice_proto::OutputMode::Append,
            OutputMode::Update => sluice_proto::OutputMode::Update,
            OutputMode::Complete => sluice_proto::OutputMode::Complete,
        }
    }

    /// The mode a task was told; `None` when unspecified or unknown.
    pub fn from_proto(mode: i32) -> Option<Self> {
        match sluice_proto::OutputMode::try_from(mode).ok()? {
            sluice_proto::OutputMode::Append => Some(OutputMode::Append),
            sluice_proto::OutputMode::Update => Some(OutputMode::Update),
            sluice_proto::OutputMode::Complete => Some(OutputMode::Complete),
            sluice_proto::OutputMode::Unspecified => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OutputMode::Append => "append",
            OutputMode::Update => "update",
            OutputMode::Complete => "complete",
        }
    }

    /// The mode a query runs in: the one set, or append for a stateless
    /// query and update for an aggregation.
    pub fn effective(set: Option<Self>, stateful: bool) -> Self {
        set.unwrap_or(if stateful {
            OutputMode::Update
        } else {
            OutputMode::Append
        })
    }
}

/// The longest watermark delay: 30 days.
pub const MAX_WATERMARK_DELAY_MS: u64 = 30 * 86_400_000;

/// Event time: `column` (a timestamp of `input`) drives the watermark,
/// which trails the latest event time seen by `delay_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkSpec {
    pub column: String,
    pub delay_ms: u64,
}

impl WatermarkSpec {
    /// Checks the watermark of table `table` at spec field `field`
    /// (`watermark`, or `watermarks.<table>`).
    pub fn validate(&self, field: &str, table: &str) -> Result<()> {
        if self.column.trim().is_empty() {
            return Err(Error::invalid(
                format!("{field}.column"),
                format!("must name a timestamp column of {table}"),
            ));
        }
        if self.delay_ms > MAX_WATERMARK_DELAY_MS {
            return Err(Error::invalid(
                format!("{field}.delay_ms"),
                format!(
                    "must be at most {MAX_WATERMARK_DELAY_MS}, got {}",
                    self.delay_ms
                ),
            ));
        }
        Ok(())
    }
}

impl WatermarkSpec {
    pub fn to_proto(&self) -> sluice_proto::Watermark {
        sluice_proto::Watermark {
            column: self.column.clone(),
            delay_ms: self.delay_ms,
        }
    }

    pub fn from_proto(w: &sluice_proto::Watermark) -> Self {
        WatermarkSpec {
            column: w.column.clone(),
            delay_ms: w.delay_ms,
        }
    }
}

/// Deduplication, after Spark's `dropDuplicatesWithinWatermark`: of the
/// query's output rows with equal `columns`, the first is kept; a key is
/// remembered until the watermark passes its first event time plus
/// `within_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupSpec {
    pub columns: Vec<String>,
    pub within_ms: u64,
}

impl DedupSpec {
    pub fn validate(&self) -> Result<()> {
        if self.columns.is_empty() {
            return Err(Error::invalid(
                "dedup.columns",
                "must name at least one output column",
            ));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if c.trim().is_empty() || self.columns[..i].contains(c) {
                return Err(Error::invalid(
                    format!("dedup.columns[{i}]"),
                    format!("{c:?} is empty or named twice"),
                ));
            }
        }
        if self.within_ms == 0 || self.within_ms > MAX_WATERMARK_DELAY_MS {
            return Err(Error::invalid(
                "dedup.within_ms",
                format!(
                    "must be in 1..={MAX_WATERMARK_DELAY_MS}, got {}",
                    self.within_ms
                ),
            ));
        }
        Ok(())
    }
}

/// Checks the state fields' ranges.
pub fn validate(
    partitions: Option<u32>,
    snapshot_interval: Option<u64>,
    max_state_bytes: Option<u64>,
) -> Result<()> {
    if max_state_bytes == Some(0) {
        return Err(Error::invalid("max_state_bytes", "must be at least 1"));
    }
    if let Some(p) = partitions
        && !(1..=MAX_STATE_PARTITIONS).contains(&p)
    {
        return Err(Error::invalid(
            "state_partitions",
            format!("must be in 1..={MAX_STATE_PARTITIONS}, got {p}"),
        ));
    }
    if let Some(i) = snapshot_interval
        && !(1..=MAX_SNAPSHOT_INTERVAL).contains(&i)
    {
        return Err(Error::invalid(
            "snapshot_interval",
            format!("must be in 1..={MAX_SNAPSHOT_INTERVAL}, got {i}"),
        ));
    }
    Ok(())
}

/// Checks `state_ttl_ms`: in 1..=[`MAX_STATE_TTL_MS`]. Whether the query
/// has an operator it applies to is the driver's check at submit.
pub fn validate_ttl(ttl_ms: Option<u64>) -> Result<()> {
    match ttl_ms {
        Some(t) if !(1..=MAX_STATE_TTL_MS).contains(&t) => Err(Error::invalid(
            "state_ttl_ms",
            format!("must be in 1..={MAX_STATE_TTL_MS} (ten years), got {t}"),
        )),
        _ => Ok(()),
    }
}
