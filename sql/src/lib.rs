//! `sluice-sql`: the one place that runs DataFusion. The driver plans a
//! query's SQL at submit to check it ([`check`]); each executor plans the
//! same SQL for every task and runs it over the task's input ([`run`]).
//! `sluice state` runs a user's one-off SELECT over rows of a query's
//! state ([`query_rows`]).
//!
//! ```text
//!  driver, submit:  sql + stream schemas ─► check ─► output schema | SqlError (named construct)
//!  executor, task:  sql + stream schemas + the batches of one stream ─► run ─► output batches
//! ```
//!
//! A query reads one or more stream tables ([`Streams`]) and any static
//! tables. A task reads one stream: its input batches are that table's
//! rows, and every other stream table is empty for it. For a query linear
//! in each stream (filters, projections, `UNION ALL`, joins with static
//! tables, one stateful operator over them all) the union of the tasks' outputs
//! is the query's answer; [`check`] refuses the rest.
//!
//! Both go through [`session::context`], whose settings make a task's
//! output (its rows and their order) a pure function of the SQL and the
//! input: one partition per table, a fixed batch size, no repartitioning;
//! the partitions of a `UNION` of streams are run in order.

mod adhoc;
mod bound;
pub mod bounded;
mod check;
mod collect;
mod error;
pub mod graph;
pub mod guard;
mod input;
mod join;
mod lineage;
mod predicate;
mod schema;
mod session;
mod session_window;
mod state_names;
mod stateful;
mod stream_table;
mod support;
mod to_char;
mod top_n;
mod window;
mod window_check;
mod window_length;
mod wrapped;

pub use adhoc::{Answer, query_rows};
pub use bound::Bound;
pub use check::{Checked, OpInfo, check};
pub use error::SqlError;
pub use graph::{Graph, Kind, Source};
pub use join::{ID as JOIN_ID, JoinInfo, Matches, StreamJoin};
pub use schema::{decode_schema, encode_schema};
pub use stateful::changes::{DIFF, with_diff};
pub use stateful::{Aggregation, WindowEnd};
pub use top_n::{MAX_N as TOP_N_MAX, TopN, TopNInfo};
pub use window::window_type;
pub use window_check::MAX_WINDOWS_PER_ROW;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use futures::executor::block_on;

use input::SharedInput;
pub use input::{InputBatches, InputError, TaskInput};
pub use predicate::{Conjunct, RowFilter};
use stream_table::StreamTable;

/// The table name of a query's input when it has one stream.
pub const INPUT: &str = "input";

/// The query of a spec without `sql`.
pub const DEFAULT_SQL: &str = "SELECT * FROM input";

/// The stream tables of a query, by name, and the one a task reads.
#[derive(Debug, Clone)]
pub struct Streams {
    /// Every stream table of the query: its name and schema, in a fixed order.
    pub tables: Vec<(String, SchemaRef)>,
    /// The table whose rows the task's input batches are (one of `tables`).
    pub reading: String,
}

impl From<SchemaRef> for Streams {
    /// One stream table, [`INPUT`], which the task reads.
    fn from(schema: SchemaRef) -> Self {
        Streams {
            tables: vec![(INPUT.to_owned(), schema)],
            reading: INPUT.to_owned(),
        }
    }
}

impl Streams {
    /// The schema of the stream table `name`.
    pub fn schema(&self, name: &str) -> Option<SchemaRef> {
        self.tables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, schema)| schema.clone())
    }

    /// The schema of the table the task reads.
    pub fn reading_schema(&self) -> Option<SchemaRef> {
        self.schema(&self.reading)
    }

    /// The names of the stream tables.
    fn names(&self) -> Vec<String> {
        self.tables.iter().map(|(name, _)| name.clone()).collect()
    }
}

/// A static table, loaded: its rows, shared by the tasks that join with it.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub schema: SchemaRef,
    pub batches: Arc<Vec<RecordBatch>>,
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

/// Runs `sql` over the stream tables `streams`, the one it reads being
/// `input` and the others empty, and the static `tables`. The query is
/// planned on a planning thread, within the limits' budget, and its
/// operators hold at most their memory (a memory pool of its own); the
/// output is meant to be polled on a blocking thread: the input is read as
/// it is polled.
pub async fn run(
    sql: &str,
    streams: impl Into<Streams>,
    input: impl Into<TaskInput>,
    tables: &[Table],
    limits: impl Into<RunLimits>,
) -> Result<Output, SqlError> {
    let Planned {
        ctx,
        plan: physical,
        input,
        ..
    } = physical(sql, streams.into(), input.into(), tables, limits.into()).await?;
    let schema = physical.schema();
    let stream = execute_in_order(physical, ctx.task_ctx())?;
    Ok(Output {
        schema,
        stream,
        input: Some(input),
    })
}

/// Runs every output partition of `plan` (one per stream in a `UNION` of
/// streams), one after another in partition order, so that the output's
/// order is a pure function of the inputs' (DataFusion's
/// `CoalescePartitionsExec` would interleave them as they come).
fn execute_in_order(
    plan: Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream, SqlError> {
    let count = plan.properties().output_partitioning().partition_count();
    if count == 1 {
        return plan.execute(0, ctx).map_err(SqlError::from_execution);
    }
    let partitions = (0..count)
        .map(|i| plan.execute(i, ctx.clone()))
        .collect::<datafusion::common::Result<Vec<_>>>()
        .map_err(SqlError::from_execution)?;
    let stream = futures::stream::iter(partitions).flatten();
    Ok(Box::pin(RecordBatchStreamAdapter::new(
        plan.schema(),
        stream,
    )))
}

/// Runs `root` with its node `target` replaced by `with`: the rest of a
/// query over rows a stateful operator made.
pub(crate) async fn run_above(
    ctx: &SessionContext,
    root: &Arc<dyn ExecutionPlan>,
    target: &Arc<dyn ExecutionPlan>,
    with: Arc<dyn ExecutionPlan>,
) -> Result<Vec<RecordBatch>, SqlError> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    let plan = root
        .clone()
        .transform_down(|n| {
            Ok(match Arc::ptr_eq(&n, target) {
                true => Transformed::yes(with.clone()),
                false => Transformed::no(n),
            })
        })
        .map_err(SqlError::from_planning)?
        .data;
    let out = collect::collect_within(plan, ctx.task_ctx(), "query output").await?;
    Ok(out.batches)
}

/// A physical plan, with the session that runs it, the input it reads,
/// and each stream table's one partition (by which a plan node tells the
/// stream it reads: [`Planned::stream_of`]).
pub(crate) struct Planned {
    pub ctx: SessionContext,
    pub plan: Arc<dyn ExecutionPlan>,
    pub input: SharedInput,
    pub streams: Vec<(String, Arc<dyn PartitionStream>)>,
}

impl Planned {
    /// The stream tables that `node` reads, by name, in plan order.
    pub fn streams_of(&self, node: &Arc<dyn ExecutionPlan>) -> Vec<String> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let mut found = Vec::new();
        let _ = node.apply(|n| {
            if let Some(s) = n.downcast_ref::<StreamingTableExec>() {
                for p in s.partitions() {
                    let named = self.streams.iter().find(|(_, q)| Arc::ptr_eq(p, q));
                    found.extend(named.map(|(name, _)| name.clone()));
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        found
    }
}

/// The physical plan of `sql` over `streams` (the one read being `input`)
/// and the static `tables`, planned on a planning thread within `limits`;
/// then `input` is opened for the columns the plan reads.
async fn physical(
    sql: &str,
    streams: Streams,
    input: TaskInput,
    tables: &[Table],
    limits: RunLimits,
) -> Result<Planned, SqlError> {
    let sql = sql.to_owned();
    let tables = tables.to_vec();
    let names = streams.names();
    let shared = SharedInput::pending();
    let stream_tables = stream_tables(&streams, &shared)?;
    let registered = stream_tables.clone();
    let (ctx, physical) = guard::on_planning_thread(limits.budget, move || {
        let ctx = with_tables(registered, &tables, limits.memory)?;
        let (plan, _) = block_on(session::logical_plan(&ctx, &sql, &names))?;
        let physical =
            block_on(ctx.state().create_physical_plan(&plan)).map_err(SqlError::from_planning)?;
        Ok((ctx, physical))
    })
    .await?;
    let (_, reading) = stream_tables
        .iter()
        .find(|(name, _)| *name == streams.reading)
        .expect("the stream read is one of the stream tables");
    shared.open(input.open(&reading.columns_read(), reading.filter()));
    let planned = Planned {
        ctx,
        plan: physical,
        input: shared,
        streams: stream_tables
            .iter()
            .flat_map(|(name, t)| t.partitions().into_iter().map(|p| (name.clone(), p)))
            .collect(),
    };
    let reading = planned.streams_of(&planned.plan);
    if reading.iter().filter(|s| **s == streams.reading).count() > 1 {
        planned.input.keep();
    }
    Ok(planned)
}

/// Each stream table: `input` for the table the task reads, empty for the
/// others.
fn stream_tables(
    streams: &Streams,
    input: &SharedInput,
) -> Result<Vec<(String, Arc<StreamTable>)>, SqlError> {
    if streams.reading_schema().is_none() {
        return Err(SqlError::Invalid(format!(
            "the task reads the stream `{}`, which is not one of the query's streams ({})",
            streams.reading,
            streams.names().join(", ")
        )));
    }
    let tables = streams.tables.iter().map(|(name, schema)| {
        let input = (*name == streams.reading).then(|| input.clone());
        (
            name.clone(),
            Arc::new(StreamTable::new(schema.clone(), input)),
        )
    });
    Ok(tables.collect())
}

/// A session with the stream tables `streams` and the static `tables`,
/// whose operators hold at most `memory` bytes. Two tables of one name are
/// refused.
fn with_tables(
    streams: Vec<(String, Arc<StreamTable>)>,
    tables: &[Table],
    memory: Option<usize>,
) -> Result<SessionContext, SqlError> {
    let ctx = session::context(memory)?;
    for (name, table) in streams {
        register(&ctx, &name, table)?;
    }
    for t in tables {
        let rows = t.batches.as_ref().clone();
        let mem = datafusion::datasource::MemTable::try_new(t.schema.clone(), vec![rows])
            .map_err(SqlError::from_planning)?;
        register(&ctx, &t.name, Arc::new(mem))?;
    }
    Ok(ctx)
}

/// Registers `table` as `name` in `ctx`, unless a table has that name.
fn register(
    ctx: &SessionContext,
    name: &str,
    table: Arc<dyn datafusion::catalog::TableProvider>,
) -> Result<(), SqlError> {
    let replaced = ctx
        .register_table(name, table)
        .map_err(SqlError::from_planning)?;
    match replaced {
        Some(_) => Err(SqlError::Invalid(format!("two tables are named `{name}`"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "streams_tests.rs"]
mod streams_tests;

#[cfg(test)]
#[path = "join_tests.rs"]
mod join_tests;

#[cfg(test)]
#[path = "projection_tests.rs"]
mod projection_tests;
