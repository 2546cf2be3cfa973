//! The Delta Lake sink's spec (`sink.delta`): the table's place, its
//! partition columns, the write mode and the data files' size.
//!
//! Each batch appends its Parquet files to the table in one commit that
//! carries the query's id and the batch as a `txn` action, so a batch run
//! again after a crash is never in the table twice (docs/design-notes.md,
//! "Exactly-once into a Delta table").

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use super::DEFAULT_MAX_FILE_BYTES;
use crate::error::{Error, Result};

/// How each batch's rows go into the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaMode {
    /// Each batch's rows are added to the table.
    #[default]
    Append,
}

impl DeltaMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DeltaMode::Append => "append",
        }
    }
}

/// `sink.delta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaSinkSpec {
    /// The table's root: a local directory or `s3://bucket/prefix`.
    pub path: String,
    /// Output columns whose values name the table's partitions
    /// (`col=value/` directories, Delta's `partitionColumns`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_by: Vec<String>,
    #[serde(default)]
    pub mode: DeltaMode,
    /// A task starts a new data file once one reaches this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_file_bytes: Option<u64>,
    /// Rewrite the small files of recent batches into fewer files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact: Option<DeltaCompactSpec>,
}

/// The default of `sink.delta.compact.every_batches`.
pub const DEFAULT_COMPACT_EVERY_BATCHES: u64 = 100;

/// `sink.delta.compact`: after every `every_batches` batches, the small
/// data files the query added since its last compaction are rewritten,
/// per partition, into files of up to `target_file_bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaCompactSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_batches: Option<u64>,
}

impl DeltaCompactSpec {
    pub fn every_batches(&self) -> u64 {
        self.every_batches.unwrap_or(DEFAULT_COMPACT_EVERY_BATCHES)
    }
}

impl DeltaSinkSpec {
    pub fn target_file_bytes(&self) -> u64 {
        self.target_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        if self
            .compact
            .as_ref()
            .is_some_and(|c| c.every_batches == Some(0))
        {
            return Err(Error::invalid(
                "sink.delta.compact.every_batches",
                "must be at least 1",
            ));
        }
        if self.target_file_bytes == Some(0) {
            return Err(Error::invalid(
                "sink.delta.target_file_bytes",
                "must be at least 1",
            ));
        }
        for (i, c) in self.partition_by.iter().enumerate() {
            let twice = self.partition_by[..i]
                .iter()
                .any(|o| o.eq_ignore_ascii_case(c));
            if c.is_empty() || twice {
                return Err(Error::invalid(
                    format!("sink.delta.partition_by[{i}]"),
                    format!("{c:?} is empty or named twice (Delta ignores case)"),
                ));
            }
        }
        crate::storage::validate_location(&self.path)
            .map_err(|reason| Error::invalid("sink.delta.path", reason))
    }

    /// What each task of the query whose id is `query_id` is told.
    pub fn to_task(&self, query_id: &str) -> pb::DeltaTaskSink {
        pb::DeltaTaskSink {
            path: self.path.clone(),
            partition_by: self.partition_by.clone(),
            target_file_bytes: self.target_file_bytes(),
            file_tag: query_id.replace('-', ""),
        }
    }
}

impl From<&DeltaSinkSpec> for pb::DeltaSink {
    fn from(d: &DeltaSinkSpec) -> Self {
        pb::DeltaSink {
            path: d.path.clone(),
            partition_by: d.partition_by.clone(),
            mode: d.mode.as_str().to_string(),
            target_file_bytes: d.target_file_bytes,
            compact: d.compact.as_ref().map(|c| pb::DeltaCompact {
                every_batches: c.every_batches,
            }),
        }
    }
}

impl TryFrom<&pb::DeltaSink> for DeltaSinkSpec {
    type Error = Error;

    fn try_from(d: &pb::DeltaSink) -> Result<Self> {
        Ok(DeltaSinkSpec {
            path: d.path.clone(),
            partition_by: d.partition_by.clone(),
            mode: match d.mode.as_str() {
                "" | "append" => DeltaMode::Append,
                m => {
                    return Err(Error::invalid(
                        "sink.delta.mode",
                        format!("unknown mode {m:?}; expected append"),
                    ));
                }
            },
            target_file_bytes: d.target_file_bytes,
            compact: d.compact.as_ref().map(|c| DeltaCompactSpec {
                every_batches: c.every_batches,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Result<DeltaSinkSpec> {
        let s: DeltaSinkSpec = serde_yaml_ng::from_str(yaml)
            .map_err(|e| Error::invalid("sink.delta", e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    #[test]
    fn a_spec_survives_the_wire() {
        let s = spec("{path: /tmp/t, partition_by: [day], target_file_bytes: 1000, compact: {}}")
            .unwrap();
        assert_eq!(s.compact.as_ref().map(|c| c.every_batches()), Some(100));
        assert_eq!(s.mode, DeltaMode::Append);
        let back = DeltaSinkSpec::try_from(&pb::DeltaSink::from(&s)).unwrap();
        assert_eq!(back, s);
        let task = s.to_task("6f1c-22");
        assert_eq!(
            (task.file_tag.as_str(), task.target_file_bytes),
            ("6f1c22", 1000)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let m = |yaml: &str| spec(yaml).unwrap_err().to_string();
        assert!(m("{path: /t, target_file_bytes: 0}").contains("sink.delta.target_file_bytes"));
        let zero = "{path: /t, compact: {every_batches: 0}}";
        assert!(m(zero).contains("sink.delta.compact.every_batches"));
        assert!(m("{path: /t, partition_by: [a, A]}").contains("sink.delta.partition_by[1]"));
        assert!(m("{path: /t, mode: overwrite}").contains("overwrite"));
        assert!(m("{path: ''}").contains("sink.delta.path"));
        let wire = pb::DeltaSink {
            path: "/t".into(),
            mode: "merge".into(),
            ..Default::default()
        };
        let e = DeltaSinkSpec::try_from(&wire).unwrap_err().to_string();
        assert!(e.contains("sink.delta.mode") && e.contains("merge"), "{e}");
    }
}
