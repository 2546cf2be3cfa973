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
//! A new source adds its spec and proto message, one planner module here,
//! named in [`resolve_schema`], [`create`] and [`open`], and its reader on
//! the executor.

mod files;
mod infer;
mod kafka;
mod rate;
mod split;
pub mod tables;

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{
    OffsetRecord, PartitionProgress, QueryCheckpoint, RECORD_VERSION, RateSourceMeta, Record,
    SchemaRecord, SourceOffsets,
};
use sluice_common::spec::SourceSpec;
use sluice_common::storage::Stores;
use sluice_common::time::now_ms;
use sluice_proto as pb;

use crate::error::DriverError;
use crate::query::ctx::Ctx;

/// What comes next for a query's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Run a batch over this input.
    Batch(SourceOffsets),
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
        ctx: &'a Ctx,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>>;

    /// Called once `offsets/N` holds `offsets`, before any task runs, and
    /// again for a batch that is re-run: the source records what it took.
    fn planned<'a>(
        &'a self,
        _ctx: &'a Ctx,
        _batch: u64,
        _offsets: &'a SourceOffsets,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async { Ok(()) })
    }

    /// Why `next` cannot be the batch after `committed`, if it cannot: a
    /// damaged checkpoint.
    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String>;

    /// The tasks of a batch's plan, each with its index (the part files'
    /// partition) and its source range; a pure function of the plan.
    fn tasks(&self, plan: &OffsetRecord) -> Vec<(u32, pb::TaskSource)>;

    /// The rows a batch reads, when its plan fixes them.
    fn planned_rows(&self, offsets: &SourceOffsets) -> Option<u64>;

    /// What the progress of a batch with this plan shows of the source.
    fn progress(&self, _offsets: &SourceOffsets) -> SourceProgress {
        SourceProgress::default()
    }
}

/// The schema of the `input` table of a new query with source `spec`:
/// fixed, declared, or inferred from the files present now. Errors name
/// the spec field.
pub async fn resolve_schema(stores: &Stores, spec: &SourceSpec) -> Result<SchemaRef, DriverError> {
    match spec {
        SourceSpec::Rate(_) => Ok(sluice_common::rate::schema()),
        SourceSpec::Files(f) => {
            let invalid = |r: String| DriverError::Invalid(format!("source.files.path: {r}"));
            stores.check_input_dir(&f.path).await.map_err(invalid)?;
            let dir = stores.open(&f.path)?;
            let files = dir.list_inputs().await?;
            let input = infer::Input {
                field: "source.files".into(),
                path: &f.path,
                format: f.format,
                schema: &f.schema,
                csv: f.csv(),
            };
            infer::schema(&input, &dir, &files).await
        }
        SourceSpec::Kafka(k) => Ok(k.schema()?),
    }
}

/// Writes the source's records of a new query (create-only; a retried
/// submit adopts what is there).
pub async fn create(
    qc: &QueryCheckpoint,
    spec: &SourceSpec,
    schema: &SchemaRef,
    epoch: u64,
) -> Result<(), DriverError> {
    match spec {
        SourceSpec::Rate(_) => {
            let rate = RateSourceMeta {
                version: RECORD_VERSION,
                start_ms: now_ms(),
                epoch,
            };
            qc.create(Record::RateStart, &rate).await?;
        }
        SourceSpec::Files(_) => {
            let record = SchemaRecord {
                version: RECORD_VERSION,
                schema: schema.as_ref().clone(),
                epoch,
            };
            qc.create(Record::Schema, &record).await?;
        }
        SourceSpec::Kafka(k) => kafka::create(qc, k, epoch).await?,
    }
    Ok(())
}

/// The planner of `ctx`'s query, with its state read from the checkpoint.
pub async fn open(ctx: &Ctx) -> Result<Box<dyn SourcePlanner>, DriverError> {
    match &ctx.spec.source {
        SourceSpec::Rate(spec) => Ok(Box::new(rate::RatePlanner::open(ctx, spec.clone()).await?)),
        SourceSpec::Files(spec) => {
            let record: SchemaRecord = ctx
                .storage("read sources/schema", || ctx.qc.require(Record::Schema))
                .await?;
            let schema = Arc::new(record.schema);
            Ok(Box::new(
                files::FilesPlanner::open(ctx, spec.clone(), schema).await?,
            ))
        }
        SourceSpec::Kafka(spec) => Ok(Box::new(
            kafka::KafkaPlanner::open(ctx, spec.clone()).await?,
        )),
    }
}

/// Refuses input files of a batch (`paths` under the directory `root`)
/// when one is outside the allowed paths: a symbolic link put there after
/// submit. The query fails naming the file and `field`, before any task
/// reads it. Checked as at submit, with the links followed.
pub(crate) async fn check_allowed(
    ctx: &Ctx,
    field: &str,
    root: &str,
    paths: Vec<String>,
) -> Result<(), DriverError> {
    let allowed = ctx.driver.config.allowed_paths.clone();
    let (field, root) = (field.to_string(), root.to_string());
    tokio::task::spawn_blocking(move || {
        paths.iter().try_for_each(|p| {
            allowed
                .check_file_resolved(&field, &root, p)
                .map_err(DriverError::Invalid)
        })
    })
    .await
    .map_err(|e| DriverError::Internal(format!("the check of new input files panicked: {e}")))?
}
