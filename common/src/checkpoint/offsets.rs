//! `offsets/<N>`: the plan of batch N, and the shape every plan has. A
//! replay runs exactly the plan it reads, so a plan that decodes is one a
//! planner could have written: its input range does not run backwards,
//! and its tasks read only bytes of the files it lists. Anything else is
//! damage, refused while decoding with the field and the numbers at fault.

use serde::{Deserialize, Serialize};

/// The plan of one batch. Invariant (docs/design-notes.md, 1): written before any task
/// of the batch runs, and a replay uses exactly this record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Stored", into = "Stored")]
pub struct OffsetRecord {
    pub version: u32,
    pub batch_id: u64,
    pub epoch: u64,
    pub batch_timestamp_ms: i64,
    /// The watermark of a query with one: rows older are dropped, state
    /// behind it is evicted. `None` before any event time was seen.
    pub watermark_ms: Option<i64>,
    /// Each watermarked input's own watermark, for a query with `sources:`
    /// (the query's is their minimum).
    pub watermarks: std::collections::BTreeMap<String, i64>,
    /// Each input's range.
    pub inputs: Inputs,
    /// The driver's cap on one task's rows when this batch was planned
    /// (absent in records written before there was one).
    pub max_rows_per_task: Option<u64>,
    /// The cap on the batch's rows when it was planned: the spec's
    /// `max_rows_per_batch` or the driver's default (absent in records
    /// written before there was one).
    pub max_rows_per_batch: Option<u64>,
    /// The files of each static table this batch reads, by table name.
    pub tables: std::collections::BTreeMap<String, Vec<TableFile>>,
}

/// [`OffsetRecord`] as stored: its inputs as `source` or `sources`.
#[derive(Clone, Serialize, Deserialize)]
struct Stored {
    version: u32,
    batch_id: u64,
    epoch: u64,
    batch_timestamp_ms: i64,
    #[serde(default)]
    watermark_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    watermarks: std::collections::BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<SourceOffsets>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sources: Option<std::collections::BTreeMap<String, SourceOffsets>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_rows_per_task: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_rows_per_batch: Option<u64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    tables: std::collections::BTreeMap<String, Vec<TableFile>>,
}

impl TryFrom<Stored> for OffsetRecord {
    type Error = String;

    fn try_from(s: Stored) -> Result<Self, String> {
        let inputs = match (s.source, s.sources) {
            (Some(one), None) => Inputs::Source(one),
            (None, Some(many)) if !many.is_empty() => Inputs::Sources(many),
            (None, _) => return Err("plans no input: it has neither `source` nor `sources`".into()),
            (Some(_), Some(_)) => return Err("has both `source` and `sources`".into()),
        };
        Ok(OffsetRecord {
            version: s.version,
            batch_id: s.batch_id,
            epoch: s.epoch,
            batch_timestamp_ms: s.batch_timestamp_ms,
            watermark_ms: s.watermark_ms,
            watermarks: s.watermarks,
            inputs,
            max_rows_per_task: s.max_rows_per_task,
            max_rows_per_batch: s.max_rows_per_batch,
            tables: s.tables,
        })
    }
}

impl From<OffsetRecord> for Stored {
    fn from(o: OffsetRecord) -> Self {
        let (source, sources) = match o.inputs {
            Inputs::Source(one) => (Some(one), None),
            Inputs::Sources(many) => (None, Some(many)),
        };
        Stored {
            version: o.version,
            batch_id: o.batch_id,
            epoch: o.epoch,
            batch_timestamp_ms: o.batch_timestamp_ms,
            watermark_ms: o.watermark_ms,
            watermarks: o.watermarks,
            source,
            sources,
            max_rows_per_task: o.max_rows_per_task,
            max_rows_per_batch: o.max_rows_per_batch,
            tables: o.tables,
        }
    }
}

/// Each input stream's range of a batch: `source` for a query with
/// `source:` (its table `input`), `sources` (by table name) for one with
/// `sources:`. Every input has a range in every batch, empty when it had
/// nothing new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inputs {
    Source(SourceOffsets),
    Sources(std::collections::BTreeMap<String, SourceOffsets>),
}

impl Inputs {
    /// The range of the input named `name` (`input` for `source`).
    pub fn get(&self, name: &str) -> Option<&SourceOffsets> {
        match self {
            Inputs::Source(s) => (name == crate::spec::INPUT).then_some(s),
            Inputs::Sources(m) => m.get(name),
        }
    }

    /// Every input's name and range, in name order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&str, &SourceOffsets)> + '_> {
        match self {
            Inputs::Source(s) => Box::new(std::iter::once((crate::spec::INPUT, s))),
            Inputs::Sources(m) => Box::new(m.iter().map(|(n, s)| (n.as_str(), s))),
        }
    }

    /// The range of a query with `source:`.
    pub fn single(&self) -> Option<&SourceOffsets> {
        match self {
            Inputs::Source(s) => Some(s),
            Inputs::Sources(_) => None,
        }
    }

    /// Where the inputs stand after the batch: the sum of their end
    /// positions (see [`SourceOffsets::end_value`]), which `commits/N`
    /// repeats.
    pub fn end_value(&self) -> u64 {
        self.iter()
            .fold(0u64, |a, (_, s)| a.saturating_add(s.end_value()))
    }

    /// Where the inputs stood before the batch.
    pub fn start_value(&self) -> u64 {
        self.iter()
            .fold(0u64, |a, (_, s)| a.saturating_add(s.start_value()))
    }
}

/// A file of a static table as a batch plans to read it: a replay that
/// finds it changed fails rather than join with other data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableFile {
    pub path: String,
    pub size: u64,
    pub modified_ms: i64,
}

/// The input range of a batch.
///
/// For the rate source, the batch covers the global values
/// `[start_value, end_value)`; partition `p` of `P` reads the values `v` in
/// that range with `v % P == p`.
///
/// For the file source, the batch reads `files` (the files numbered
/// `[start_seq, end_seq)` in the order the source took them), cut into
/// `tasks`: task `p` reads the ranges `tasks[p]`.
///
/// For the Kafka source, the batch reads the offsets `[start, end)` of
/// every partition it lists (every partition known when it was planned).
///
/// For the Nexmark source, the batch covers the events `[start_event,
/// end_event)` of the generated stream (of all kinds), and reads its
/// table's rows among them (see `crate::nexmark`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "Unchecked")]
pub enum SourceOffsets {
    Rate {
        start_value: u64,
        end_value: u64,
    },
    Files {
        start_seq: u64,
        end_seq: u64,
        files: Vec<SourceFile>,
        tasks: Vec<Vec<FileRange>>,
    },
    Kafka {
        partitions: Vec<KafkaRange>,
    },
    Nexmark {
        start_event: u64,
        end_event: u64,
    },
}

/// What one batch reads of one topic partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaRange {
    pub topic: String,
    pub partition: i32,
    /// The first offset read.
    pub start: i64,
    /// The offset after the last one read.
    pub end: i64,
    /// The partition's latest offset when the batch was planned (its lag
    /// is `latest - end`).
    pub latest: i64,
    /// Set when the range does not start where the previous batch of the
    /// partition ended, which is that end (`fail_on_data_loss: false`):
    /// below `start`, the offsets between were gone (retention deleted
    /// them); above it, the partition went back (it was recreated or
    /// truncated) and the batch starts at its earliest offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_end: Option<i64>,
}

impl KafkaRange {
    /// The records known to be lost before this range: the offsets
    /// between the previous batch's end and `start`.
    pub fn lost(&self) -> u64 {
        self.previous_end
            .map_or(0, |p| u64::try_from(self.start - p).unwrap_or(0))
    }
}

/// A source file as a batch plans to read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// The path under the source directory.
    pub path: String,
    pub size: u64,
}

/// The bytes `[start, end)` of `files[file]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRange {
    pub file: u32,
    pub start: u64,
    pub end: u64,
}

impl SourceOffsets {
    /// Where the input stands after this batch: the rate source's next
    /// value, or the number of files the file source has taken.
    pub fn end_value(&self) -> u64 {
        match self {
            SourceOffsets::Rate { end_value, .. } => *end_value,
            SourceOffsets::Nexmark { end_event, .. } => *end_event,
            SourceOffsets::Files { end_seq, .. } => *end_seq,
            SourceOffsets::Kafka { partitions } => partitions.iter().map(|r| r.end as u64).sum(),
        }
    }

    /// Whether the range reads nothing and skips nothing: the range of an
    /// input without news in a batch of a query with several inputs.
    pub fn is_idle(&self) -> bool {
        match self {
            SourceOffsets::Rate {
                start_value,
                end_value,
            } => start_value == end_value,
            SourceOffsets::Nexmark {
                start_event,
                end_event,
            } => start_event == end_event,
            SourceOffsets::Files { files, .. } => files.is_empty(),
            SourceOffsets::Kafka { partitions } => partitions
                .iter()
                .all(|r| r.start == r.end && r.previous_end.is_none()),
        }
    }

    /// Where the input stood before this batch.
    pub fn start_value(&self) -> u64 {
        match self {
            SourceOffsets::Rate { start_value, .. } => *start_value,
            SourceOffsets::Nexmark { start_event, .. } => *start_event,
            SourceOffsets::Files { start_seq, .. } => *start_seq,
            SourceOffsets::Kafka { partitions } => partitions.iter().map(|r| r.start as u64).sum(),
        }
    }

    /// Checks what every planner writes and a replay relies on: a range
    /// that does not run backwards, one sequence number per listed file,
    /// and task ranges within the bytes of the listed files.
    pub fn check(&self) -> Result<(), String> {
        match self {
            SourceOffsets::Rate {
                start_value,
                end_value,
            } if start_value > end_value => Err(format!(
                "start_value {start_value} is after end_value {end_value}"
            )),
            SourceOffsets::Rate { .. } => Ok(()),
            SourceOffsets::Nexmark {
                start_event,
                end_event,
            } if start_event > end_event => Err(format!(
                "start_event {start_event} is after end_event {end_event}"
            )),
            SourceOffsets::Nexmark { .. } => Ok(()),
            SourceOffsets::Files {
                start_seq,
                end_seq,
                files,
                tasks,
            } => {
                if end_seq.checked_sub(*start_seq) != u64::try_from(files.len()).ok() {
                    return Err(format!(
                        "start_seq {start_seq} and end_seq {end_seq}, but {} files listed",
                        files.len()
                    ));
                }
                for (t, r) in tasks
                    .iter()
                    .enumerate()
                    .flat_map(|(t, rs)| rs.iter().map(move |r| (t, r)))
                {
                    let Some(f) = files.get(r.file as usize) else {
                        return Err(format!(
                            "task {t} reads file {} of {} listed",
                            r.file,
                            files.len()
                        ));
                    };
                    if r.start > r.end || r.end > f.size {
                        return Err(format!(
                            "task {t} reads bytes {}..{} of {:?}, which has {} bytes",
                            r.start, r.end, f.path, f.size
                        ));
                    }
                }
                Ok(())
            }
            SourceOffsets::Kafka { partitions } => check_kafka(partitions),
        }
    }
}

/// Every range runs forwards from a real offset, says where the previous
/// batch ended only when it starts elsewhere, and names its partition once.
fn check_kafka(partitions: &[KafkaRange]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for r in partitions {
        let at = format!("topic {:?} partition {}", r.topic, r.partition);
        if r.partition < 0 || r.start < 0 || r.start > r.end || r.end > r.latest {
            return Err(format!(
                "{at}: offsets {}..{} with latest {} do not make a range",
                r.start, r.end, r.latest
            ));
        }
        if r.previous_end.is_some_and(|p| p < 0 || p == r.start) {
            return Err(format!(
                "{at}: previous_end {:?} with start {}",
                r.previous_end, r.start
            ));
        }
        if !seen.insert((&r.topic, r.partition)) {
            return Err(format!("{at} is listed twice"));
        }
    }
    Ok(())
}

/// [`SourceOffsets`] as stored, before [`SourceOffsets::check`].
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Unchecked {
    Rate {
        start_value: u64,
        end_value: u64,
    },
    Files {
        start_seq: u64,
        end_seq: u64,
        files: Vec<SourceFile>,
        tasks: Vec<Vec<FileRange>>,
    },
    Kafka {
        partitions: Vec<KafkaRange>,
    },
    Nexmark {
        start_event: u64,
        end_event: u64,
    },
}

impl TryFrom<Unchecked> for SourceOffsets {
    type Error = String;

    fn try_from(u: Unchecked) -> Result<Self, String> {
        let offsets = match u {
            Unchecked::Rate {
                start_value,
                end_value,
            } => SourceOffsets::Rate {
                start_value,
                end_value,
            },
            Unchecked::Files {
                start_seq,
                end_seq,
                files,
                tasks,
            } => SourceOffsets::Files {
                start_seq,
                end_seq,
                files,
                tasks,
            },
            Unchecked::Kafka { partitions } => SourceOffsets::Kafka { partitions },
            Unchecked::Nexmark {
                start_event,
                end_event,
            } => SourceOffsets::Nexmark {
                start_event,
                end_event,
            },
        };
        offsets.check()?;
        Ok(offsets)
    }
}
