//! Sources on the driver: each plans a batch's input, recorded in
//! `offsets/N`, and cuts it into one task per partition.
//!
//! ```text
//!  submit: resolve_schema(spec) ─► check SQL ─► create(records: sources/…)
//!  run:    open(ctx) ─► SourcePlanner ─► next(committed) ─► Batch(offsets) ─► offsets/N ─► planned(N)
//!                                             │                     │
//!                                      Wait / Finished        tasks(offsets) ─► one TaskSource per partition
//! ```
//!
//! A new source adds its spec and proto message, one planner module here
//! with its [`SourceKind`], registered once in [`kind`], and its reader on
//! the executor. A planner touches its query only through [`SourceIo`].

mod files;
mod infer;
mod io;
mod kafka;
mod nexmark;
mod rate;
mod split;
mod streams;
pub mod tables;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{
    Log, OffsetRecord, PartitionProgress, QueryCheckpoint, SourceOffsets,
};
use sluice_common::secrets::Secrets;
use sluice_common::spec::{QuerySpec, SourceSpec};
use sluice_common::storage::Stores;
use sluice_proto as pb;

use crate::error::DriverError;
pub use io::SourceIo;
pub use streams::{Streams, Task};

/// What comes next for a query's input (one source's range, or every
/// input's: [`Streams::next`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next<T = SourceOffsets> {
    /// Run a batch over this input.
    Batch(T),
    /// Nothing new yet: look again after this long (at most).
    Wait(Duration),
    /// A bounded source is fully committed.
    Finished,
}

/// The caps on one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The spec's `max_rows_per_batch`, or else the driver's
    /// `--max-rows-per-batch`.
    pub max_rows_per_batch: Option<u64>,
    /// The driver's cap on one batch's bytes of files (`--max-bytes-per-batch`).
    pub max_bytes_per_batch: u64,
    /// The driver's cap on one task's rows (`--max-rows-per-task`).
    pub max_rows_per_task: u64,
    /// The driver's cap on one task's bytes of files (`--max-bytes-per-task`).
    pub max_bytes_per_task: u64,
    /// The task slots of the executors attached now (at least 1).
    pub parallelism: u32,
}

/// What a batch's plan says of its source, for its progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceProgress {
    /// Records skipped because they were gone (a loss the spec accepts).
    pub records_lost: u64,
    /// Each partition's range and latest offset (a Kafka source).
    pub partitions: Vec<PartitionProgress>,
}

/// A source as the driver sees it.
pub trait SourcePlanner: Send + Sync {
    /// The schema of the query's `input` table.
    fn schema(&self) -> SchemaRef;

    /// The input of the next batch, after `committed` (the input of the
    /// last committed batch; `None` before the first).
    fn next<'a>(
        &'a self,
        io: &'a SourceIo,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>>;

    /// Called once `offsets/N` holds `offsets`, before any task runs, and
    /// again for a batch that is re-run: the source records what it took.
    fn planned<'a>(
        &'a self,
        _io: &'a SourceIo,
        _batch: u64,
        _offsets: &'a SourceOffsets,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async { Ok(()) })
    }

    /// Why `next` cannot be the batch after `committed`, if it cannot: a
    /// damaged checkpoint.
    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String>;

    /// The tasks of `input`, this source's range in a batch's `plan`, each
    /// with its index among them and its source range; a pure function of
    /// the plan. A range of another source is an error (see
    /// [`other_source`]).
    fn tasks(
        &self,
        plan: &OffsetRecord,
        input: &SourceOffsets,
    ) -> Result<Vec<(u32, pb::TaskSource)>, DriverError>;

    /// The range of a batch that reads nothing of this source, after
    /// `committed`: the next batch starts where it ends.
    fn idle(&self, committed: Option<&SourceOffsets>) -> SourceOffsets;

    /// The rows a batch reads, when its plan fixes them.
    fn planned_rows(&self, offsets: &SourceOffsets) -> Option<u64>;

    /// What the progress of a batch with this plan shows of the source.
    fn progress(&self, _offsets: &SourceOffsets) -> SourceProgress {
        SourceProgress::default()
    }
}

/// The error of a planner of source `kind` given a plan of another
/// source's input: recovery's `gap` refuses such a checkpoint first, so
/// this names a damaged `offsets/N` rather than panicking.
pub(crate) fn other_source(kind: &str, plan: &OffsetRecord, input: &SourceOffsets) -> DriverError {
    let found = match input {
        SourceOffsets::Rate { .. } => "rate",
        SourceOffsets::Files { .. } => "files",
        SourceOffsets::Kafka { .. } => "kafka",
        SourceOffsets::Nexmark { .. } => "nexmark",
    };
    DriverError::Internal(format!(
        "{} plans {found} input, but the query reads a {kind} source",
        Log::Offsets.entry(plan.batch_id)
    ))
}

/// One kind of source: what a submit resolves and records of it, and how
/// a runner opens its planner. Each kind registers once, in [`kind`].
trait SourceKind: Send + Sync {
    /// The schema of the `input` table of a new query: fixed, declared,
    /// or inferred from the files present now. Errors name the spec field.
    fn resolve_schema<'a>(
        &'a self,
        stores: &'a Stores,
    ) -> BoxFuture<'a, Result<SchemaRef, DriverError>>;

    /// Writes the source's records of a new query (create-only; a retried
    /// submit adopts what is there); `secrets` is what the source may read
    /// to reach its brokers.
    fn create<'a>(
        &'a self,
        qc: &'a QueryCheckpoint,
        schema: &'a SchemaRef,
        secrets: &'a Secrets,
        epoch: u64,
    ) -> BoxFuture<'a, Result<(), DriverError>>;

    /// The planner, with its state read from the checkpoint.
    fn open<'a>(
        &'a self,
        io: &'a SourceIo,
    ) -> BoxFuture<'a, Result<Box<dyn SourcePlanner>, DriverError>>;
}

/// The registry of source kinds: the one place that matches on a
/// source's spec. `field` is the source's spec field (`source`,
/// `sources.<table>`).
fn kind<'s>(spec: &'s SourceSpec, field: &str) -> Box<dyn SourceKind + 's> {
    let field = field.to_string();
    match spec {
        SourceSpec::Rate(s) => Box::new(rate::Kind(s)),
        SourceSpec::Files(s) => Box::new(files::Kind(s, field)),
        SourceSpec::Kafka(s) => Box::new(kafka::Kind(s, field)),
        SourceSpec::Nexmark(s) => Box::new(nexmark::Kind(s)),
    }
}

/// The spec field of input `table` of `spec`.
fn field(spec: &QuerySpec, table: &str) -> String {
    match spec.source {
        Some(_) => "source".into(),
        None => format!("sources.{table}"),
    }
}

/// The schema of each input table of a new query with spec `spec`, in
/// table order (see [`SourceKind::resolve_schema`]).
pub async fn resolve_schemas(
    stores: &Stores,
    spec: &QuerySpec,
) -> Result<Vec<(String, SchemaRef)>, DriverError> {
    let mut out = Vec::new();
    for input in spec.inputs() {
        let schema = kind(input.source, &field(spec, input.name))
            .resolve_schema(stores)
            .await?;
        out.push((input.name.to_string(), schema));
    }
    Ok(out)
}

/// Writes each input's source records of a new query, each under its own
/// view of the checkpoint (see [`SourceKind::create`]).
pub async fn create(
    qc: &QueryCheckpoint,
    spec: &QuerySpec,
    schemas: &[(String, SchemaRef)],
    secrets: &Secrets,
    epoch: u64,
) -> Result<(), DriverError> {
    for (input, (name, schema)) in spec.inputs().iter().zip(schemas) {
        let scoped = match spec.source {
            Some(_) => qc.clone(),
            None => qc.input(name),
        };
        kind(input.source, &field(spec, name))
            .create(&scoped, schema, secrets, epoch)
            .await?;
    }
    Ok(())
}

/// The planner of the input `io` is the door of, reading `spec`, with its
/// state read from the checkpoint.
pub async fn open(io: &SourceIo, spec: &SourceSpec) -> Result<Box<dyn SourcePlanner>, DriverError> {
    kind(spec, io.field()).open(io).await
}
