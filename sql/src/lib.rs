//! `sluice-sql`: the one place that runs DataFusion. The driver plans a
//! query's SQL at submit to check it ([`check`]); each executor plans the
//! same SQL for every task and runs it over the task's input ([`run`]).
//!
//! ```text
//!  driver, submit:  sql + input schema ─► check ─► output schema | SqlError (named construct)
//!  executor, task:  sql + input schema + input batches ─► run ─► output batches
//! ```
//!
//! Both go through [`session::context`], whose settings make a task's
//! output (its rows and their order) a pure function of the SQL and the
//! input: one partition, a fixed batch size, no repartitioning.

pub mod bounded;
mod error;
pub mod guard;
mod input;
mod schema;
mod session;
mod stateful;
mod support;
mod window;

pub use error::SqlError;
pub use schema::{decode_schema, encode_schema};
pub use stateful::{Aggregation, WindowEnd};
pub use window::window_type;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::SessionContext;
use futures::executor::block_on;

pub use input::{InputBatches, InputError};
use input::{Once, SharedInput};

/// The table name of a query's input.
pub const INPUT: &str = "input";

/// The query of a spec without `sql`.
pub const DEFAULT_SQL: &str = "SELECT * FROM input";

/// A static table, loaded: its rows, shared by the tasks that join with it.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub schema: SchemaRef,
    pub batches: Arc<Vec<RecordBatch>>,
}

/// Plans `sql` over `input` and the static `tables` (name and schema)
/// without running it: the output schema, or the reason it cannot run in
/// Sluice (a syntax error with its position, an unknown name, an
/// unsupported construct, a planning limit of [`guard`]). Plans on a
/// planning thread, within `budget`.
pub async fn check(
    sql: &str,
    input: SchemaRef,
    tables: &[(String, SchemaRef)],
    budget: Duration,
) -> Result<Checked, SqlError> {
    let sql = sql.to_owned();
    let tables: Vec<Table> = tables
        .iter()
        .map(|(name, schema)| Table {
            name: name.clone(),
            schema: schema.clone(),
            batches: Arc::new(Vec::new()),
        })
        .collect();
    guard::on_planning_thread(budget, move || {
        let ctx = with_input(Once::empty(input), &tables, None)?;
        let (plan, shape) = block_on(session::logical_plan(&ctx, &sql))?;
        Ok(Checked {
            output: Arc::new(plan.schema().as_arrow().clone()),
            keys: shape.keys,
            window: shape.window,
        })
    })
    .await
}

/// A checked query.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The schema of its output rows.
    pub output: SchemaRef,
    /// The grouping key of its aggregation over the stream, the columns of
    /// a `SELECT DISTINCT`; `None` when it keeps no state.
    pub keys: Option<Vec<String>>,
    /// The input column of its event-time window key, if it has one.
    pub window: Option<String>,
}

/// A running query's output.
pub struct Output {
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
    /// The query's input; `None` for a plan over no task input.
    input: Option<SharedInput>,
}

impl Output {
    /// The schema of every output batch.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next output batch; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<RecordBatch, SqlError>> {
        use futures::StreamExt;
        let next = self.stream.next().await?;
        Some(next.map_err(SqlError::from_execution))
    }

    /// Reads what the query left of its input, once its output has
    /// ended: a task reads its whole input, whatever the plan needed of
    /// it (see [`input`]).
    pub async fn read_rest(&mut self) -> Result<(), SqlError> {
        match self.input.take() {
            Some(input) => input.read_rest().await.map_err(SqlError::Input),
            None => Ok(()),
        }
    }
}

/// What a task's query may use: the time to plan it, and the memory its
/// operators (aggregations, joins) may hold; `None` is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub budget: Duration,
    pub memory: Option<usize>,
}

impl From<Duration> for RunLimits {
    /// A planning budget, with unbounded memory.
    fn from(budget: Duration) -> Self {
        RunLimits {
            budget,
            memory: None,
        }
    }
}

/// Runs `sql` over `input` and the static `tables`. The query is planned
/// on a planning thread, within the limits' budget, and its operators hold
/// at most their memory (a memory pool of its own); the output is meant to
/// be polled on a blocking thread: the input is read as it is polled.
pub async fn run(
    sql: &str,
    schema: SchemaRef,
    input: InputBatches,
    tables: &[Table],
    limits: impl Into<RunLimits>,
) -> Result<Output, SqlError> {
    let (ctx, physical, input) = physical(sql, schema, input, tables, limits.into()).await?;
    let schema = physical.schema();
    let stream = execute_stream(physical, ctx.task_ctx()).map_err(SqlError::from_execution)?;
    Ok(Output {
        schema,
        stream,
        input: Some(input),
    })
}

/// The physical plan of `sql` over `input` and the static `tables`, with
/// the session that runs it and the input it reads, planned on a planning
/// thread within `limits`.
async fn physical(
    sql: &str,
    schema: SchemaRef,
    input: InputBatches,
    tables: &[Table],
    limits: RunLimits,
) -> Result<(SessionContext, Arc<dyn ExecutionPlan>, SharedInput), SqlError> {
    let sql = sql.to_owned();
    let tables = tables.to_vec();
    let input = SharedInput::new(input);
    let partition = Once::new(schema, input.clone());
    let (ctx, physical) = guard::on_planning_thread(limits.budget, move || {
        let ctx = with_input(partition, &tables, limits.memory)?;
        let (plan, _) = block_on(session::logical_plan(&ctx, &sql))?;
        let physical =
            block_on(ctx.state().create_physical_plan(&plan)).map_err(SqlError::from_planning)?;
        Ok((ctx, physical))
    })
    .await?;
    Ok((ctx, physical, input))
}

/// A session whose table `input` is `input`, with the static `tables`,
/// whose operators hold at most `memory` bytes.
fn with_input(
    input: Once,
    tables: &[Table],
    memory: Option<usize>,
) -> Result<SessionContext, SqlError> {
    let ctx = session::context(memory)?;
    let table = StreamingTable::try_new(input.schema.clone(), vec![Arc::new(input)])
        .map_err(SqlError::from_planning)?;
    ctx.register_table(INPUT, Arc::new(table))
        .map_err(SqlError::from_planning)?;
    for t in tables {
        let rows = t.batches.as_ref().clone();
        let mem = datafusion::datasource::MemTable::try_new(t.schema.clone(), vec![rows])
            .map_err(SqlError::from_planning)?;
        ctx.register_table(t.name.as_str(), Arc::new(mem))
            .map_err(SqlError::from_planning)?;
    }
    Ok(ctx)
}

#[cfg(test)]
mod tests;
