//! Deduplication (`dedup: {columns, within_ms}`): of the rows with one
//! key, the first is emitted, and the key is remembered until the
//! watermark passes its event time plus `within_ms`.
//!
//! ```text
//!  shuffle rows, in map order ─► key seen (in the state, or earlier in this batch)? drop
//!                             └► else emit the row; state += (key, event time + within_ms)
//!  state rows whose expiry the watermark has passed ─► evicted
//! ```
//!
//! A state row is the key columns, then `__sluice_expires`. A row whose
//! event time is null never expires.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow_select::concat::concat_batches;
use sluice_proto::{DedupWork, TaskAssignment};
use sluice_sql::WindowEnd;

use super::{Advanced, Operator, Shuffled};
use crate::error::ExecutorError;
use crate::stage::{self, Assigned};
use crate::state::rescale::Repartition;
use crate::state::table::StateTable;

/// The column of a dedup state row that holds its expiry.
const EXPIRES: &str = "__sluice_expires";

/// A deduplicating query's operator.
pub struct Dedup {
    /// The query's output rows, which the map tasks shuffled.
    rows: SchemaRef,
    keys: Vec<usize>,
    /// The event time column of a row.
    time: usize,
    within: i64,
    state: SchemaRef,
}

/// The indices of `columns` in `schema`.
pub fn key_columns(schema: &SchemaRef, columns: &[String]) -> Result<Vec<usize>, ExecutorError> {
    columns
        .iter()
        .map(|c| {
            schema.index_of(c).map_err(|_| {
                ExecutorError::MalformedTask(format!("dedup column {c:?} is not an output column"))
            })
        })
        .collect()
}

impl Repartition for Dedup {
    /// By the dedup columns, a state row's key.
    fn route(&self, rows: &RecordBatch, partitions: u32) -> Result<Vec<u32>, ExecutorError> {
        let keys = rows.columns()[..self.keys.len()].to_vec();
        crate::shuffle::buckets_of(&keys, rows.num_rows(), partitions)
    }
}

impl Operator for Dedup {
    type Work = DedupWork;

    async fn plan(
        task: &TaskAssignment,
        work: &DedupWork,
        assigned: &Assigned<'_>,
        _graph: (&sluice_sql::Graph, usize),
    ) -> Result<Self, ExecutorError> {
        let malformed =
            |m: &str| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
        let (Some(dedup), Some(event)) = (&work.dedup, &task.event_time) else {
            return Err(malformed("a dedup task needs dedup and event_time"));
        };
        let empty = sluice_sql::TaskInput::empty();
        // Planned, not run: the schema of the rows the map tasks shuffled.
        let rows = sluice_sql::run(
            &assigned.plan.sql,
            assigned.streams.clone(),
            empty,
            &assigned.tables,
            sluice_sql::guard::budget_ms(assigned.plan.plan_budget_ms),
        )
        .await?
        .schema();
        let keys = key_columns(&rows, &dedup.columns)?;
        let time = rows
            .index_of(&event.column)
            .map_err(|_| malformed("the watermark column is not an output column"))?;
        Ok(Dedup {
            state: state_schema(&rows, &keys),
            rows,
            keys,
            time,
            within: i64::try_from(dedup.within_ms).unwrap_or(i64::MAX),
        })
    }

    fn input_schema(&self, _side: u32) -> Result<SchemaRef, ExecutorError> {
        Ok(self.rows.clone())
    }

    fn state_schema(&self) -> (SchemaRef, usize) {
        (self.state.clone(), self.keys.len())
    }

    fn output_schema(&self) -> SchemaRef {
        self.rows.clone()
    }

    async fn advance(
        &self,
        state: &StateTable,
        rows: Vec<Shuffled>,
    ) -> Result<Advanced, ExecutorError> {
        let rows = concat_batches(&self.rows, &super::rows(rows)).map_err(fail)?;
        let candidates = self.state_rows(&rows)?;
        let first = state.first_new(&candidates)?;
        Ok(Advanced {
            deletes: None,
            upserts: stage::filter(&candidates, &first)?,
            pending: Some(stage::filter(&rows, &first)?),
            retracted: None,
            unmatchable: 0,
        })
    }

    fn evict(
        &self,
        state: &StateTable,
        watermark: Option<i64>,
    ) -> Result<Option<RecordBatch>, ExecutorError> {
        let expiry = (self.keys.len(), WindowEnd::Plus(0));
        match watermark {
            Some(wm) => stage::closed(&state.scan()?, expiry, wm).map(Some),
            None => Ok(None),
        }
    }

    async fn emit(
        &self,
        advanced: Advanced,
        _evicted: RecordBatch,
        _state: &StateTable,
    ) -> Result<Vec<RecordBatch>, ExecutorError> {
        Ok(advanced.pending.into_iter().collect())
    }
}

impl Dedup {
    /// Each row's would-be state row: its key, and its event time plus
    /// `within` milliseconds.
    fn state_rows(&self, rows: &RecordBatch) -> Result<RecordBatch, ExecutorError> {
        let ms = arrow_cast::cast(
            rows.column(self.time),
            &DataType::Timestamp(TimeUnit::Millisecond, None),
        )
        .map_err(fail)?;
        let ms = ms
            .as_any()
            .downcast_ref::<arrow_array::TimestampMillisecondArray>();
        let ms = ms.ok_or_else(|| ExecutorError::TaskPanicked("event time cast".into()))?;
        let expires: arrow_array::TimestampMillisecondArray = ms
            .iter()
            .map(|t| t.map(|t| t.saturating_add(self.within)))
            .collect();
        let mut columns: Vec<ArrayRef> =
            self.keys.iter().map(|&i| rows.column(i).clone()).collect();
        columns.push(Arc::new(expires));
        RecordBatch::try_new(self.state.clone(), columns).map_err(fail)
    }
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("dedup: {e}"))
}

/// A state row: the key columns, then the expiry.
fn state_schema(rows: &SchemaRef, keys: &[usize]) -> SchemaRef {
    let mut fields: Vec<Field> = keys.iter().map(|&i| rows.field(i).clone()).collect();
    fields.push(Field::new(
        EXPIRES,
        DataType::Timestamp(TimeUnit::Millisecond, None),
        true,
    ));
    Arc::new(Schema::new(fields))
}
