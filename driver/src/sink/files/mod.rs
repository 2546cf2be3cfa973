//! The file sink on the driver: its path and `partition_by` checked at
//! submit; each batch's files checked and listed in its manifest (and,
//! every `compact_interval` batches, a manifest segment) before
//! `commits/N`; temporary files of failed attempts removed (see
//! [`cleanup`]); and manifests that segments list deleted after the last
//! `retain_batches`. The manifests themselves are `sluice_common::sink`'s.
//!
//! Invariant (docs/design-notes.md, 2): a batch's manifest lists only
//! files that exist with the size their task reported, and it is durable
//! before `commits/N`; a replay of the batch rebuilds the same manifest
//! from the same files and adopts it.

pub mod cleanup;

use std::sync::Mutex;
use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::QueryCheckpoint;
use sluice_common::sink::manifest::compacts_at;
use sluice_common::sink::{FileSink, SinkFile};
use sluice_common::spec::{FileSinkSpec, OutputMode, QuerySpec};
use sluice_common::storage::{Stores, check_sink_location, overlap_resolved};
use sluice_proto as pb;
use tracing::{debug, warn};

use super::{Committed, Committer, Ended, Prepared, SinkIo, SinkKind, Written};
use crate::config::DriverConfig;
use crate::error::DriverError;
use cleanup::Cleaner;

/// The file sink of a query's spec.
pub(super) struct Kind<'s>(pub &'s FileSinkSpec);

impl SinkKind for Kind<'_> {
    fn describe(&self) -> &'static str {
        "writes files"
    }

    fn written(&self, report: &pb::task_output::Sink, into: &mut Written) -> bool {
        files_written(report, into)
    }

    /// Refuses a sink that can never be written (see
    /// [`check_sink_location`]) or that overlaps (is, contains or lies
    /// inside) another query's file sink or the checkpoint root, as
    /// written or with its symbolic links followed: their files would
    /// collide, or a sink would write into a checkpoint. Reads the disk.
    fn check_spec(
        &self,
        _spec: &QuerySpec,
        others: &[(String, QuerySpec)],
        checkpoint_root: &str,
    ) -> Result<(), DriverError> {
        check_place("sink.files.path", &self.0.path, others, checkpoint_root)
    }

    /// Refuses a sink in an object store bucket that is missing or
    /// refuses the credentials; a store that does not answer is a
    /// retryable error.
    fn probe<'a>(
        &'a self,
        config: &'a DriverConfig,
        _deadline: Duration,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(probe(&config.stores, &self.0.path, "sink.files.path"))
    }

    fn check_output(&self, output: &SchemaRef, _mode: OutputMode) -> Result<(), DriverError> {
        check_partition_by("sink.files.partition_by", &self.0.partition_by, output)
    }

    /// The rows a task says it wrote are the rows of the files it lists,
    /// so a batch never commits rows that no file holds.
    fn check_report(&self, batch: u64, task: usize, o: &pb::TaskOutput) -> Result<(), DriverError> {
        check_rows_in_files(batch, task, o)
    }

    fn open<'a>(
        &'a self,
        io: &'a SinkIo,
    ) -> BoxFuture<'a, Result<Box<dyn Committer>, DriverError>> {
        Box::pin(async move {
            let stores = io.config().stores.clone();
            let path = &self.0.path;
            let sink = io
                .storage("open sink", || async { FileSink::open(&stores, path) })
                .await?;
            let committer = Files {
                sink,
                io: io.clone(),
                cleaner: Mutex::new(Cleaner::default()),
            };
            Ok(Box::new(committer) as Box<dyn Committer>)
        })
    }

    /// The batch the stop abandoned may commit after all: its abandoned
    /// sink manifest goes; a real one (its commit had written it) stays.
    fn reopen<'a>(
        &'a self,
        config: &'a DriverConfig,
        _qc: &'a QueryCheckpoint,
        batch: u64,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(async move {
            let sink = FileSink::open(&config.stores, &self.0.path)?;
            Ok(sink.reopen(batch).await?.is_some())
        })
    }

    /// Nothing of the query runs any more: no temporary file is in use,
    /// and a stopped query never re-runs what it did not commit.
    fn ended<'a>(&'a self, end: &'a Ended<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Ok(sink) = FileSink::open(&end.config.stores, &self.0.path) else {
                return;
            };
            if end.stopped {
                cleanup::abandon_uncommitted(sink.clone(), end.qc.clone(), end.epoch).await;
            }
            cleanup::purge(sink, None).await;
        })
    }
}

/// A running query's file sink.
struct Files {
    sink: FileSink,
    io: SinkIo,
    cleaner: Mutex<Cleaner>,
}

impl Committer for Files {
    /// Makes the batch's files visible in the sink: checked, listed in
    /// the batch's manifest, and compacted into a segment when the batch
    /// is one that compacts.
    fn commit<'a>(
        &'a self,
        batch: u64,
        written: &'a Written,
        _prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        Box::pin(async move {
            let (sink, io, files) = (&self.sink, &self.io, &written.files);
            // An executor's word is checked: the manifest lists only files
            // that exist with the size that was reported.
            io.storage("check sink files", || sink.check_files(files))
                .await?;
            let manifest = FileSink::manifest(batch, io.epoch(), files.clone());
            let stored = io
                .storage("write sink manifest", || sink.write_manifest(&manifest))
                .await?;
            if stored.abandoned {
                // Invariant: only a stopped query abandons a batch, and a
                // stopped query never runs again.
                return Err(DriverError::Internal(format!(
                    "batch {batch} was abandoned when its query stopped; it cannot commit"
                )));
            }
            let interval = io.config().compact_interval;
            io.storage("compact sink manifests", || {
                sink.write_compact(&stored, interval)
            })
            .await?;
            Ok(Committed::default())
        })
    }

    /// Removes the temporary files of failed attempts when due, and after
    /// each batch that writes a manifest segment, the per-batch manifests
    /// that a segment lists and that are older than the last
    /// `retain_batches` (see `sluice_common::sink::manifest::purge_candidates`).
    /// Segments are kept; readers read them all and the deltas after the
    /// latest, and list again when a file they listed is gone.
    fn after_commit(&self, committed: u64) {
        let config = self.io.config();
        if compacts_at(committed, config.compact_interval) {
            let (sink, retain) = (self.sink.clone(), config.retain_batches);
            self.io.spawn(purge_manifests(sink, committed, retain));
        }
        cleanup::after_commit(&self.cleaner, &self.io, &self.sink, committed);
    }
}

/// Deletes the sink manifests readers no longer need after `committed`; a
/// failure is logged and left for the next batch that compacts.
async fn purge_manifests(sink: FileSink, committed: u64, retain: u64) {
    match sink.purge_manifests(committed, retain).await {
        Ok(0) => {}
        Ok(removed) => debug!(removed, committed, "old sink manifests removed"),
        Err(e) => warn!(
            error = %e,
            committed,
            "purging old sink manifests failed; will try again later"
        ),
    }
}

/// Adds a report of files written to `into`; `false` for a report of
/// another kind. The Delta sink's tasks report files too.
pub(super) fn files_written(report: &pb::task_output::Sink, into: &mut Written) -> bool {
    let pb::task_output::Sink::Files(f) = report else {
        return false;
    };
    for file in &f.files {
        into.bytes += file.bytes;
        into.files.push(SinkFile {
            path: file.path.clone(),
            rows: file.rows,
            bytes: file.bytes,
        });
    }
    true
}

/// The rows a task says it wrote are the rows of the files it lists.
pub(super) fn check_rows_in_files(
    batch: u64,
    task: usize,
    o: &pb::TaskOutput,
) -> Result<(), DriverError> {
    let in_files: u64 = match &o.sink {
        Some(pb::task_output::Sink::Files(f)) => f.files.iter().map(|f| f.rows).sum(),
        _ => 0,
    };
    if o.rows != in_files {
        return Err(DriverError::TaskFailed(format!(
            "batch {batch}, task {task}: the executor reported {} rows written, but the files \
             it lists hold {in_files}",
            o.rows
        )));
    }
    Ok(())
}

/// Refuses a sink (named by `field`) that can never be written (see
/// [`check_sink_location`]) or that overlaps (is, contains or lies inside)
/// another query's sink or the checkpoint root, as written or with its
/// symbolic links followed: their files would collide, or a sink would
/// write into a checkpoint. Reads the disk.
pub(super) fn check_place(
    field: &str,
    sink: &str,
    others: &[(String, QuerySpec)],
    checkpoint_root: &str,
) -> Result<(), DriverError> {
    check_sink_location(sink).map_err(|r| DriverError::Invalid(format!("{field}: {r}")))?;
    if overlap_resolved(sink, checkpoint_root) {
        return Err(DriverError::Invalid(format!(
            "{field}: {sink} overlaps the checkpoint root {checkpoint_root}"
        )));
    }
    let mut paths = others
        .iter()
        .filter_map(|(name, spec)| Some((name, spec.sink_path()?)));
    if let Some((name, other)) = paths.find(|(_, o)| overlap_resolved(sink, o)) {
        return Err(DriverError::Invalid(format!(
            "{field}: {sink} overlaps the sink of query {name:?} ({other})"
        )));
    }
    Ok(())
}

/// Refuses a sink (named by `field`) in a bucket that is missing or
/// refuses the credentials.
pub(super) async fn probe(stores: &Stores, sink: &str, field: &str) -> Result<(), DriverError> {
    let invalid = |e: sluice_common::Error| match e {
        sluice_common::Error::Config(r) => DriverError::Invalid(format!("{field}: {r}")),
        e => DriverError::Common(e),
    };
    stores
        .open(sink)
        .map_err(invalid)?
        .probe()
        .await
        .map_err(invalid)
}

/// The sink's `partition_by` (the spec's `field`) names output columns
/// of scalar types, and leaves at least one for the files.
pub(super) fn check_partition_by(
    field: &str,
    partition_by: &[String],
    output: &SchemaRef,
) -> Result<(), DriverError> {
    for (i, c) in partition_by.iter().enumerate() {
        let Ok(f) = output.field_with_name(c) else {
            let names: Vec<&str> = output.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(DriverError::Invalid(format!(
                "{field}[{i}]: {c:?} is not an output column of the query; its columns are {}",
                names.join(", ")
            )));
        };
        if f.data_type().is_nested() {
            return Err(DriverError::Invalid(format!(
                "{field}[{i}]: column {c:?} is {}, not a scalar type",
                f.data_type()
            )));
        }
    }
    if !partition_by.is_empty() && partition_by.len() >= output.fields().len() {
        return Err(DriverError::Invalid(format!(
            "{field}: names every output column; the files need at least one"
        )));
    }
    Ok(())
}
