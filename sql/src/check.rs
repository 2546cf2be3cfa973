//! Checking a query at submit: its SQL planned as every task will plan
//! it, without running it, and what the driver needs to know of it (its
//! output schema, its stateful operators and how they feed each other).

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::executor::block_on;

use crate::graph::{Graph, Kind, Source};
use crate::input::SharedInput;
use crate::stream_table::StreamTable;
use crate::{
    Aggregation, JoinInfo, Planned, SqlError, Table, TopN, TopNInfo, guard, join, session,
    with_tables,
};

/// Plans `sql` over the stream tables `streams` and the static `tables`
/// (name and schema) without running it: the output schema, or the reason
/// it cannot run in Sluice (a syntax error with its position, an unknown
/// name, an unsupported construct, a planning limit of [`guard`]). Plans
/// on a planning thread, within `budget`.
pub async fn check(
    sql: &str,
    streams: &[(String, SchemaRef)],
    tables: &[(String, SchemaRef)],
    budget: Duration,
) -> Result<Checked, SqlError> {
    let sql = sql.to_owned();
    let names: Vec<String> = streams.iter().map(|(name, _)| name.clone()).collect();
    let streams: Vec<(String, Arc<StreamTable>)> = streams
        .iter()
        .map(|(name, schema)| {
            (
                name.clone(),
                Arc::new(StreamTable::new(schema.clone(), None)),
            )
        })
        .collect();
    let tables: Vec<Table> = tables
        .iter()
        .map(|(name, schema)| Table {
            name: name.clone(),
            schema: schema.clone(),
            batches: Arc::new(Vec::new()),
        })
        .collect();
    guard::on_planning_thread(budget, move || {
        let ctx = with_tables(streams.clone(), &tables, None)?;
        let (plan, shape) = block_on(session::logical_plan(&ctx, &sql, &names))?;
        let physical =
            block_on(ctx.state().create_physical_plan(&plan)).map_err(SqlError::from_planning)?;
        let graph = Graph::of(Planned {
            ctx: ctx.clone(),
            plan: physical,
            input: SharedInput::new(Box::pin(futures::stream::empty())),
            streams: streams
                .iter()
                .flat_map(|(name, t)| t.partitions().into_iter().map(|p| (name.clone(), p)))
                .collect(),
        })?;
        let names = graph.names();
        let mut ops = Vec::with_capacity(graph.len());
        let (mut join, mut top_n) = (None, None);
        for (i, name) in names.into_iter().enumerate() {
            let (mut op_join, mut session) = (None, false);
            let windowed = match graph.kind(i) {
                Kind::Aggregate => {
                    let agg = Aggregation::of(&graph, i)?;
                    session = agg.session().is_some();
                    agg.window().is_some()
                }
                Kind::Join => {
                    op_join = Some(join::info(&graph, i)?);
                    join = op_join.clone();
                    false
                }
                Kind::TopN => {
                    let t = TopN::of(&graph, i)?;
                    top_n = Some(TopNInfo { limit: t.limit() });
                    t.window().is_some()
                }
            };
            ops.push(OpInfo {
                kind: graph.kind(i),
                name,
                sources: graph.sources(i),
                consumer: graph.consumer(i),
                windowed,
                session,
                join: op_join,
            });
        }
        Ok(Checked {
            output: Arc::new(plan.schema().as_arrow().clone()),
            keys: shape.keys,
            window: shape.window,
            join,
            top_n,
            ops,
        })
    })
    .await
}

/// A checked query.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The schema of its output rows.
    pub output: SchemaRef,
    /// The grouping key of its aggregation over the streams, the columns of
    /// a `SELECT DISTINCT`; `None` when it keeps no state.
    pub keys: Option<Vec<String>>,
    /// The input column of its event-time window key, if it has one.
    pub window: Option<String>,
    /// Its join of two streams, if it has one (its stateful operator).
    pub join: Option<JoinInfo>,
    /// Its top-N, if it has one (its stateful operator).
    pub top_n: Option<TopNInfo>,
    /// Its stateful operators, in the order they run (see [`graph`]).
    pub ops: Vec<OpInfo>,
}

/// One stateful operator of a checked query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpInfo {
    pub kind: Kind,
    /// Its state directory under `state/`.
    pub name: String,
    /// What each of its sides reads.
    pub sources: Vec<Source>,
    /// The operator and side its output feeds; `None`: the query's output.
    pub consumer: Option<(usize, usize)>,
    /// Whether it groups by an event-time window (an aggregation, a
    /// top-N), whose groups the watermark closes.
    pub windowed: bool,
    /// Whether it is an aggregation by session windows.
    pub session: bool,
    /// A join's sides and bound.
    pub join: Option<JoinInfo>,
}
