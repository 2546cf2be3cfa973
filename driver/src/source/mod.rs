//! Sources on the driver: each plans a batch's input, recorded in
//! `offsets/N`, and cuts it into one task per partition.
//!
//! ```text
//!  open(query) ─► SourcePlanner ─► next(committed) ─► Batch(offsets) ─► offsets/N
//!                                         │                     │
//!                                  Wait / Finished        tasks(offsets) ─► one TaskSource per partition
//! ```
//!
//! A new source adds its spec and proto message, one planner module here,
//! named in [`open`], and its reader on the executor.

mod rate;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::SourceOffsets;
use sluice_common::spec::SourceSpec;
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
    pub max_rows_per_batch: Option<u64>,
    /// The driver's cap on one task's rows (`--max-rows-per-task`).
    pub max_rows_per_task: u64,
}

/// A source as the driver sees it.
pub trait SourcePlanner: Send + Sync {
    /// The input of the next batch, after `committed` (the input of the
    /// last committed batch; `None` before the first).
    fn next<'a>(
        &'a self,
        committed: Option<&'a SourceOffsets>,
        limits: Limits,
    ) -> BoxFuture<'a, Result<Next, DriverError>>;

    /// Why `next` cannot be the batch after `committed`, if it cannot: a
    /// damaged checkpoint.
    fn gap(&self, committed: Option<&SourceOffsets>, next: &SourceOffsets) -> Option<String>;

    /// The tasks of a batch: one source range per partition with input.
    fn tasks(&self, offsets: &SourceOffsets) -> Vec<(u32, pb::TaskSource)>;

    /// The rows a batch reads, when its plan fixes them.
    fn planned_rows(&self, offsets: &SourceOffsets) -> Option<u64>;
}

/// The schema of the `input` table that `spec` gives a query's SQL.
pub fn input_schema(spec: &SourceSpec) -> SchemaRef {
    match spec {
        SourceSpec::Rate(_) => sluice_common::rate::schema(),
    }
}

/// The planner of `ctx`'s query, with its state read from the checkpoint.
pub async fn open(ctx: &Ctx) -> Result<Box<dyn SourcePlanner>, DriverError> {
    match &ctx.spec.source {
        SourceSpec::Rate(spec) => Ok(Box::new(rate::RatePlanner::open(ctx, spec.clone()).await?)),
    }
}
