//! The file source's planner: takes the files that appeared in the source
//! directory, in name order, a batch at a time.
//!
//! ```text
//!  list dir ─► skip `.`/`_` names and files already taken ─► first
//!  max_files_per_batch ─► allowed paths? ─► split into tasks ─► offsets/N ─► sources/files/N
//! ```
//!
//! Invariant: a file is taken by exactly one batch. `offsets/N` names the
//! batch's files with their sizes, so a replay reads the same ones; the
//! log `sources/files/N`, written right after `offsets/N` and never
//! purged, remembers them after `offsets/N` is gone. On open, the files
//! taken are those of the log plus those of any `offsets/N` written after
//! the log's last entry (a driver that died between the two writes).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{
    FileLogEntry, Log, OffsetRecord, QueryCheckpoint, RECORD_VERSION, Record, SchemaRecord,
    SourceFile, SourceOffsets,
};
use sluice_common::secrets::Secrets;
use sluice_common::spec::{FileSourceSpec, OnBadRecord};
use sluice_common::storage::{Storage, Stores};
use sluice_proto as pb;

use super::io::SourceIo;
use super::split::split;
use super::{Limits, Next, SourcePlanner};
use crate::error::DriverError;

/// How long to wait before listing the directory again when it has
/// nothing new.
const POLL: Duration = Duration::from_millis(250);

pub struct FilesPlanner {
    spec: FileSourceSpec,
    schema: SchemaRef,
    dir: Storage,
    /// The paths of every file a batch has taken.
    taken: Mutex<HashSet<String>>,
}

/// The file source's registration (see [`super::SourceKind`]): its schema
/// is inferred (or declared) at submit and fixed in `sources/schema`.
/// The second field is the spec field of the source (`source`,
/// `sources.<table>`).
pub(super) struct Kind<'s>(pub &'s FileSourceSpec, pub String);

impl super::SourceKind for Kind<'_> {
    fn resolve_schema<'a>(
        &'a self,
        stores: &'a Stores,
    ) -> BoxFuture<'a, Result<SchemaRef, DriverError>> {
        Box::pin(async move {
            let f = self.0;
            let invalid = |r: String| DriverError::Invalid(format!("{}.files.path: {r}", self.1));
            stores.check_input_dir(&f.path).await.map_err(invalid)?;
            let dir = stores.open(&f.path)?;
            let files = dir.list_inputs().await?;
            let input = super::infer::Input {
                field: format!("{}.files", self.1),
                path: &f.path,
                format: f.format,
                schema: &f.schema,
                csv: f.csv(),
            };
            super::infer::schema(&input, &dir, &files).await
        })
    }

    fn create<'a>(
        &'a self,
        qc: &'a QueryCheckpoint,
        schema: &'a SchemaRef,
        _secrets: &'a Secrets,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async move {
            let record = SchemaRecord {
                version: RECORD_VERSION,
                schema: schema.as_ref().clone(),
                epoch,
            };
            qc.create(Record::Schema, &record).await?;
            Ok(())
        })
    }

    fn open<'a>(
        &'a self,
        io: &'a SourceIo,
    ) -> BoxFuture<'a, Result<Box<dyn SourcePlanner>, DriverError>> {
        Box::pin(async move {
            let record: SchemaRecord = io
                .storage("read sources/schema", || {
                    io.checkpoint().require(Record::Schema)
                })
                .await?;
            let schema = std::sync::Arc::new(record.schema);
            let planner: Box<dyn SourcePlanner> =
                Box::new(FilesPlanner::open(io, self.0.clone(), schema).await?);
            Ok(planner)
        })
    }
}

impl FilesPlanner {
    pub async fn open(
        io: &SourceIo,
        spec: FileSourceSpec,
        schema: SchemaRef,
    ) -> Result<Self, DriverError> {
        let dir = io
            .storage("open source directory", || async {
                io.stores().open(&spec.path)
            })
            .await?;
        let mut taken = HashSet::new();
        let logged = io
            .storage("list the source log", || {
                io.checkpoint().batches(Log::SourceFiles)
            })
            .await?;
        for &n in &logged {
            let entry: Option<FileLogEntry> = io
                .storage("read the source log", || {
                    io.checkpoint().entry(Log::SourceFiles, n)
                })
                .await?;
            let entry = entry.ok_or_else(|| missing(io, Log::SourceFiles, n))?;
            taken.extend(entry.files);
        }
        let after = logged.last().map_or(0, |l| l + 1);
        let planned = io
            .storage("list offsets", || io.checkpoint().batches(Log::Offsets))
            .await?;
        for n in planned.into_iter().filter(|&n| n >= after) {
            let o = io
                .storage("read offsets", || io.checkpoint().offsets(n))
                .await?;
            let o = o.ok_or_else(|| missing(io, Log::Offsets, n))?;
            if let Some(SourceOffsets::Files { files, .. }) = o.inputs.get(io.table()) {
                taken.extend(files.iter().map(|f| f.path.clone()));
            }
        }
        Ok(FilesPlanner {
            spec,
            schema,
            dir,
            taken: Mutex::new(taken),
        })
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.taken.lock().expect("taken files lock poisoned")
    }
}

/// The first files whose sizes add up to at most `cap` bytes, and at
/// least one file, so that a file larger than the cap is read too.
fn within_bytes(files: impl Iterator<Item = SourceFile>, cap: u64) -> Vec<SourceFile> {
    let mut total = 0u64;
    files
        .take_while(|f| {
            let first = total == 0;
            total = total.saturating_add(f.size.max(1));
            first || total <= cap
        })
        .collect()
}

fn missing(io: &SourceIo, log: Log, batch: u64) -> DriverError {
    sluice_common::Error::Corrupt {
        path: io.checkpoint().describe_entry(log, batch),
        reason: "missing".into(),
    }
    .into()
}

impl SourcePlanner for FilesPlanner {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next<'a>(
        &'a self,
        io: &'a SourceIo,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>> {
        Box::pin(async move {
            let done = committed.map_or(0, SourceOffsets::end_value);
            let mut room = u64::from(self.spec.max_files_per_batch.unwrap_or(u32::MAX));
            if let Some(total) = self.spec.total_files {
                if done >= total {
                    return Ok(Next::Finished);
                }
                room = room.min(total - done);
            }
            let listed = io
                .storage("list the source directory", || self.dir.list_inputs())
                .await?;
            let files: Vec<SourceFile> = {
                let taken = self.taken();
                let fresh = listed
                    .into_iter()
                    .filter(|f| !taken.contains(&f.path))
                    .take(usize::try_from(room).unwrap_or(usize::MAX))
                    .map(|f| SourceFile {
                        path: f.path,
                        size: f.size,
                    });
                within_bytes(fresh, limits.max_bytes_per_batch)
            };
            if files.is_empty() {
                return Ok(Next::Wait(POLL));
            }
            let paths = files.iter().map(|f| f.path.clone()).collect();
            io.check_allowed(
                &format!("{}.files.path", io.field()),
                &self.spec.path,
                paths,
            )
            .await?;
            let tasks = split(&files, limits.max_bytes_per_task, limits.parallelism);
            Ok(Next::Batch(SourceOffsets::Files {
                start_seq: done,
                end_seq: done + files.len() as u64,
                files,
                tasks,
            }))
        })
    }

    fn planned<'a>(
        &'a self,
        io: &'a SourceIo,
        batch: u64,
        offsets: &'a SourceOffsets,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async move {
            let SourceOffsets::Files { files, .. } = offsets else {
                return Err(DriverError::Internal(format!(
                    "batch {batch}: a file source planned another source's offsets"
                )));
            };
            let entry = FileLogEntry {
                version: RECORD_VERSION,
                batch_id: batch,
                files: files.iter().map(|f| f.path.clone()).collect(),
            };
            let (stored, _) = io
                .storage("write the source log", || {
                    io.checkpoint()
                        .create_entry(Log::SourceFiles, batch, &entry)
                })
                .await?;
            if stored != entry {
                return Err(sluice_common::Error::Corrupt {
                    path: io.checkpoint().describe_entry(Log::SourceFiles, batch),
                    reason: format!("lists other files than {} plans", Log::Offsets.entry(batch)),
                }
                .into());
            }
            self.taken().extend(entry.files);
            Ok(())
        })
    }

    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String> {
        let end = committed.map_or(0, SourceOffsets::end_value);
        match next {
            SourceOffsets::Files { start_seq, .. } if *start_seq == end => None,
            SourceOffsets::Files { start_seq, .. } => Some(format!(
                "starts at file {start_seq}, but the previous batch ended at file {end}"
            )),
            SourceOffsets::Rate { .. }
            | SourceOffsets::Kafka { .. }
            | SourceOffsets::Nexmark { .. } => Some("plans another source's input".into()),
        }
    }

    fn tasks(
        &self,
        plan: &OffsetRecord,
        input: &SourceOffsets,
    ) -> Result<Vec<(u32, pb::TaskSource)>, DriverError> {
        let SourceOffsets::Files { files, tasks, .. } = input else {
            return Err(super::other_source("files", plan, input));
        };
        let csv = (self.spec.format == sluice_common::spec::Format::Csv)
            .then(|| pb::CsvOptions::from(&self.spec.csv()));
        tasks
            .iter()
            .enumerate()
            .map(|(p, ranges)| {
                let ranges = ranges
                    .iter()
                    .map(|r| {
                        let f = &files[r.file as usize];
                        pb::FileRange {
                            path: f.path.clone(),
                            size: f.size,
                            start: r.start,
                            end: r.end,
                            modified_ms: 0,
                        }
                    })
                    .collect();
                let task = pb::FilesTask {
                    root: self.spec.path.clone(),
                    format: self.spec.format.as_str().to_string(),
                    ranges,
                    skip_bad_records: self.spec.on_bad_record == OnBadRecord::Skip,
                    csv: csv.clone(),
                    label: "source file".into(),
                };
                let source = pb::TaskSource {
                    kind: Some(pb::task_source::Kind::Files(task)),
                    table: String::new(),
                };
                Ok((p as u32, source))
            })
            .collect()
    }

    fn planned_rows(&self, _offsets: &SourceOffsets) -> Option<u64> {
        None
    }

    fn idle(&self, committed: Option<&SourceOffsets>) -> SourceOffsets {
        let end = committed.map_or(0, SourceOffsets::end_value);
        SourceOffsets::Files {
            start_seq: end,
            end_seq: end,
            files: Vec::new(),
            tasks: Vec::new(),
        }
    }
}
