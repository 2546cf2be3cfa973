//! A query's input streams on the driver: one planner per table (`input`
//! for `source:`, each table of `sources:`), planned together into each
//! batch's [`Inputs`].
//!
//! ```text
//!  next: each input's planner ─► Batch(range) | Wait | Finished
//!        all Finished ─► Finished     none Batch ─► Wait(shortest)
//!        else Batch(Inputs): each input's range, idle (empty) for those without one
//!  tasks: each input's tasks, numbered on from the previous input's (one index space
//!         for part files and shuffle maps), tagged with their table
//! ```
//!
//! Invariant: every input has a range in every batch, so the next batch
//! of each starts where its range in the last one ended.

use std::collections::BTreeMap;

use arrow_schema::SchemaRef;
use sluice_common::checkpoint::{Inputs, OffsetRecord, SourceOffsets};
use sluice_common::spec::{QuerySpec, WatermarkSpec};
use sluice_proto as pb;

use super::{Limits, Next, SourceIo, SourcePlanner, SourceProgress};
use crate::error::DriverError;

/// One input stream: its table, planner and door.
struct Stream {
    name: String,
    planner: Box<dyn SourcePlanner>,
    io: SourceIo,
    watermark: Option<WatermarkSpec>,
}

/// Every input stream of a query, in table name order.
pub struct Streams {
    streams: Vec<Stream>,
    /// Whether the spec has `sources:` (its plans record `sources`).
    many: bool,
}

/// A task of a batch: its index (the part files' partition, the shuffle
/// map) and its source range, which names its table.
pub type Task = (u32, pb::TaskSource);

impl Streams {
    /// The planners of `spec`'s inputs, each with its state read from the
    /// checkpoint through its own door.
    pub async fn open(io: &SourceIo, spec: &QuerySpec) -> Result<Self, DriverError> {
        let many = spec.source.is_none();
        let mut streams = Vec::new();
        for input in spec.inputs() {
            let io = if many {
                io.input(input.name)
            } else {
                io.clone()
            };
            streams.push(Stream {
                name: input.name.to_string(),
                planner: super::open(&io, input.source).await?,
                io,
                watermark: input.watermark.cloned(),
            });
        }
        Ok(Streams { streams, many })
    }

    /// Each table's name and schema, in order.
    pub fn schemas(&self) -> Vec<(String, SchemaRef)> {
        self.streams
            .iter()
            .map(|s| (s.name.clone(), s.planner.schema()))
            .collect()
    }

    /// Each watermarked table's name and watermark.
    pub fn watermarks(&self) -> impl Iterator<Item = (&str, &WatermarkSpec)> {
        self.streams
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.watermark.as_ref()?)))
    }

    /// The inputs of the next batch, after `committed` (see the module
    /// header).
    pub async fn next(
        &self,
        committed: Option<&Inputs>,
        limits: Limits,
    ) -> Result<Next<Inputs>, DriverError> {
        let mut ranges = BTreeMap::new();
        let (mut any, mut finished, mut wait) = (false, 0, None);
        for s in &self.streams {
            let before = committed.and_then(|c| c.get(&s.name));
            let range = match s.planner.next(&s.io, before, limits).await? {
                Next::Batch(range) => {
                    any = true;
                    range
                }
                Next::Wait(d) => {
                    wait = Some(wait.map_or(d, |w: std::time::Duration| w.min(d)));
                    s.planner.idle(before)
                }
                Next::Finished => {
                    finished += 1;
                    s.planner.idle(before)
                }
            };
            ranges.insert(s.name.clone(), range);
        }
        Ok(match (any, wait) {
            (true, _) => Next::Batch(self.inputs(ranges)),
            (false, Some(d)) => Next::Wait(d),
            (false, None) => {
                debug_assert_eq!(finished, self.streams.len());
                Next::Finished
            }
        })
    }

    /// Every input's range of a batch that reads nothing, after
    /// `committed`.
    pub fn idle(&self, committed: Option<&Inputs>) -> Inputs {
        let ranges = self.streams.iter().map(|s| {
            let before = committed.and_then(|c| c.get(&s.name));
            (s.name.clone(), s.planner.idle(before))
        });
        self.inputs(ranges.collect())
    }

    fn inputs(&self, mut ranges: BTreeMap<String, SourceOffsets>) -> Inputs {
        match (self.many, ranges.pop_first()) {
            (false, Some((_, range))) => Inputs::Source(range),
            (_, first) => {
                ranges.extend(first);
                Inputs::Sources(ranges)
            }
        }
    }

    /// The range of `stream` in `inputs`; a plan without one is damage.
    fn range<'a>(
        &self,
        stream: &Stream,
        inputs: &'a Inputs,
        batch: u64,
    ) -> Result<&'a SourceOffsets, DriverError> {
        inputs.get(&stream.name).ok_or_else(|| {
            DriverError::Internal(format!(
                "{} has no range of the input `{}`",
                sluice_common::checkpoint::Log::Offsets.entry(batch),
                stream.name
            ))
        })
    }

    /// Called once `offsets/N` holds `inputs` (see
    /// [`SourcePlanner::planned`]).
    pub async fn planned(&self, batch: u64, inputs: &Inputs) -> Result<(), DriverError> {
        for s in &self.streams {
            let range = self.range(s, inputs, batch)?;
            s.planner.planned(&s.io, batch, range).await?;
        }
        Ok(())
    }

    /// Why `next` cannot follow `committed`, naming the input.
    pub fn gap(&self, committed: Option<&Inputs>, next: &Inputs) -> Option<String> {
        if next.iter().count() != self.streams.len() {
            let names: Vec<&str> = next.iter().map(|(n, _)| n).collect();
            return Some(format!("plans the inputs {}", names.join(", ")));
        }
        self.streams.iter().find_map(|s| {
            let Some(range) = next.get(&s.name) else {
                return Some(format!("has no range of the input `{}`", s.name));
            };
            let before = committed.and_then(|c| c.get(&s.name));
            let gap = s.planner.gap(before, range)?;
            Some(match self.many {
                true => format!("input `{}`: {gap}", s.name),
                false => gap,
            })
        })
    }

    /// The tasks of a batch's plan (see the module header); a pure
    /// function of the plan. An input with nothing to read has none.
    pub fn tasks(&self, plan: &OffsetRecord) -> Result<Vec<Task>, DriverError> {
        let mut out = Vec::new();
        let mut base = 0u32;
        for s in &self.streams {
            let range = self.range(s, &plan.inputs, plan.batch_id)?;
            if range.is_idle() {
                continue;
            }
            let tasks = s.planner.tasks(plan, range)?;
            let next = tasks
                .iter()
                .map(|(p, _)| base + p + 1)
                .max()
                .unwrap_or(base);
            for (p, mut source) in tasks {
                source.table = s.name.clone();
                out.push((base + p, source));
            }
            base = next;
        }
        Ok(out)
    }

    /// The rows a batch reads, when every input's plan fixes them.
    pub fn planned_rows(&self, inputs: &Inputs) -> Option<u64> {
        self.streams.iter().try_fold(0u64, |sum, s| {
            let range = inputs.get(&s.name)?;
            let rows = if range.is_idle() {
                0
            } else {
                s.planner.planned_rows(range)?
            };
            Some(sum + rows)
        })
    }

    /// What the progress of a batch shows of its inputs.
    pub fn progress(&self, inputs: &Inputs) -> SourceProgress {
        let mut out = SourceProgress::default();
        for s in &self.streams {
            if let Some(range) = inputs.get(&s.name) {
                let p = s.planner.progress(range);
                out.records_lost += p.records_lost;
                out.partitions.extend(p.partitions);
            }
        }
        out
    }
}
