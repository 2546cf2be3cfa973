//! A query's state read from outside the query (`sluice state`): its
//! state operators, each with its directory under `state/`, its state
//! schema and key columns, planned from the query's spec and the input
//! schemas its checkpoint fixed, as its reduce tasks plan them; and one
//! operator's state at a committed version, rebuilt from the checkpoint
//! as a reduce task rebuilds it.
//!
//! ```text
//!  spec + input schemas ─► sluice_sql::check ─► sluice_plan::plan ─► operators (as the driver's)
//!                       └► Graph::plan ─► Operator::plan ─► state_schema (as reduce.rs)
//!  state/<op>/[g<G>/]<p>/… at version N ─► rescale::load, one partition at a time ─► scan ─► rows
//! ```
//!
//! Reading is safe while the query runs: state files are create-only, and
//! every partition's files of version N exist once `commits/N` does. An
//! operator whose keys expire (`state_ttl_ms`) stores each row with its
//! stamp; the rows read are the operator's, without it.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_common::checkpoint::{QueryCheckpoint, Record, SchemaRecord, TablesRecord};
use sluice_common::source_schema;
use sluice_common::spec::QuerySpec;
use sluice_common::state::StateStore;
use sluice_proto as pb;
use sluice_proto::task_assignment::Work;
use sluice_sql::Graph;

use crate::error::ExecutorError;
use crate::operator::{Aggregate, Dedup, Join, Operator, TopN};
use crate::stage::Assigned;
use crate::state::States;
use crate::state::local::LocalConfig;
use crate::state::rescale::{self, Place, Repartition};

/// The memory of the local store a state is rebuilt in: the rows read
/// are in memory anyway, this is only the store's cache.
const MEMORY_BYTES: u64 = 64 << 20;

/// One state operator of a query.
#[derive(Clone)]
pub struct StateOperator {
    /// Its directory under `state/`.
    pub name: String,
    /// A state row: the key columns, then the values, as the state
    /// files hold them.
    pub schema: SchemaRef,
    /// The same columns under the names a user reads them by: the
    /// query's own names of its keys and aggregates (see
    /// [`Operator::state_names`]). [`read`] gives rows of this schema.
    pub view: SchemaRef,
    /// How many leading columns of a state row are its key.
    pub keys: usize,
    /// Whether its rows are stored with the time of their last upsert
    /// (its keys expire: [`sluice_plan::StatefulOp::ttl`]).
    pub stamped: bool,
    /// How its rows move between partitions, for a state generation
    /// rebuilt from the one before (see `crate::state::rescale`).
    router: Arc<dyn Repartition>,
}

impl std::fmt::Debug for StateOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateOperator")
            .field("name", &self.name)
            .field("schema", &self.schema)
            .field("view", &self.view)
            .field("keys", &self.keys)
            .field("stamped", &self.stamped)
            .finish()
    }
}

/// A query's state partitions now, and how its state generations began.
#[derive(Debug, Clone)]
pub struct Lineage {
    pub partitions: u32,
    pub rescales: Vec<pb::StateRescale>,
}

/// The lineage of `spec`'s query (the spec it runs with, as
/// [`QueryCheckpoint::spec`] reads it) from its checkpoint.
pub async fn lineage(qc: &QueryCheckpoint, spec: &QuerySpec) -> Result<Lineage, ExecutorError> {
    let rescales = qc.rescales().await?;
    Ok(Lineage {
        partitions: spec.state_partitions(),
        rescales: rescales.iter().map(|r| r.rescale().into()).collect(),
    })
}

/// A query's input tables, by name and schema, as its tasks see them.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The stream tables, in the spec's order.
    pub streams: Vec<(String, SchemaRef)>,
    /// The static tables.
    pub tables: Vec<(String, SchemaRef)>,
}

/// The schemas of `spec`'s input tables: fixed by the source kind (rate,
/// Nexmark, Kafka's spec), or at submit in the query's checkpoint `qc`
/// (a file source's `sources/schema`, the static tables' `sources/tables`).
pub async fn inputs(qc: &QueryCheckpoint, spec: &QuerySpec) -> Result<Inputs, ExecutorError> {
    let mut streams = Vec::new();
    for input in spec.inputs() {
        let schema = match source_schema::fixed(input.source)? {
            Some(schema) => schema,
            None => {
                let scoped = match spec.source {
                    Some(_) => qc.clone(),
                    None => qc.input(input.name),
                };
                let record: SchemaRecord = scoped.require(Record::Schema).await?;
                Arc::new(record.schema)
            }
        };
        streams.push((input.name.to_string(), schema));
    }
    let mut tables = Vec::new();
    if !spec.tables.is_empty() {
        let record: TablesRecord = qc.require(Record::Tables).await?;
        for (name, t) in record.tables {
            tables.push((name, Arc::new(t.schema)));
        }
    }
    Ok(Inputs { streams, tables })
}

/// The state operators of `spec`'s query over `inputs`, in the order they
/// run; none for a query without state.
pub async fn operators(
    spec: &QuerySpec,
    inputs: &Inputs,
) -> Result<Vec<StateOperator>, ExecutorError> {
    let budget = sluice_sql::guard::DEFAULT_BUDGET;
    let checked = sluice_sql::check(spec.sql(), &inputs.streams, &inputs.tables, budget).await?;
    let ops = sluice_plan::plan(spec, &checked)
        .map_err(|e| ExecutorError::TaskPanicked(format!("the query's state operators: {e}")))?;
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    let plan = pb::TaskPlan {
        sql: spec.sql().to_string(),
        ..Default::default()
    };
    let sink = pb::TaskSink::default();
    let assigned = Assigned {
        plan: &plan,
        files: &sink,
        streams: sluice_sql::Streams {
            tables: inputs.streams.clone(),
            reading: inputs
                .streams
                .first()
                .map(|(n, _)| n.clone())
                .unwrap_or_default(),
        },
        tables: inputs
            .tables
            .iter()
            .map(|(name, schema)| sluice_sql::Table {
                name: name.clone(),
                schema: schema.clone(),
                batches: Arc::default(),
            })
            .collect(),
    };
    let empty = sluice_sql::TaskInput::empty();
    let graph = Graph::plan(
        spec.sql(),
        assigned.streams.clone(),
        empty,
        &assigned.tables,
        budget,
    )
    .await?;
    let task = task(spec);
    let mut out = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let at = (&graph, i);
        let name = op.name.as_str();
        let mut state = match op.operator.work(None) {
            Work::Aggregate(w) => state_of::<Aggregate>(name, &task, &w, &assigned, at).await?,
            Work::Dedup(w) => state_of::<Dedup>(name, &task, &w, &assigned, at).await?,
            Work::Join(w) => state_of::<Join>(name, &task, &w, &assigned, at).await?,
            Work::TopN(w) => state_of::<TopN>(name, &task, &w, &assigned, at).await?,
            Work::Map(_) | Work::ShuffleMap(_) => {
                return Err(ExecutorError::TaskPanicked(format!(
                    "operator `{name}` has no reduce task's work"
                )));
            }
        };
        state.stamped = op.ttl;
        out.push(state);
    }
    Ok(out)
}

/// A reduce task of `spec`'s query as far as planning its operators reads
/// it: its names, and the event time column of its input.
fn task(spec: &QuerySpec) -> pb::TaskAssignment {
    let column = spec.watermark.as_ref().map(|w| w.column.clone());
    pb::TaskAssignment {
        task_id: format!("{}/state", spec.name),
        query_name: spec.name.clone(),
        event_time: spec.has_watermark().then(|| pb::EventTime {
            column: column.unwrap_or_default(),
            watermark_ms: None,
        }),
        ..Default::default()
    }
}

/// Operator `O`, named `name`, planned as its reduce task plans it.
async fn state_of<O: Operator + 'static>(
    name: &str,
    task: &pb::TaskAssignment,
    work: &O::Work,
    assigned: &Assigned<'_>,
    at: (&Graph, usize),
) -> Result<StateOperator, ExecutorError> {
    let op = O::plan(task, work, assigned, at).await?;
    let (schema, keys) = op.state_schema();
    let view = renamed(&schema, op.state_names());
    Ok(StateOperator {
        name: name.to_string(),
        schema,
        view,
        keys,
        stamped: false,
        router: Arc::new(op),
    })
}

/// `schema` with its fields named `names`; `schema` itself if they do
/// not fit it one to one.
fn renamed(schema: &SchemaRef, names: Vec<String>) -> SchemaRef {
    if names.len() != schema.fields().len() {
        return schema.clone();
    }
    let fields: Vec<arrow_schema::Field> = schema
        .fields()
        .iter()
        .zip(names)
        .map(|(f, n)| f.as_ref().clone().with_name(n))
        .collect();
    Arc::new(arrow_schema::Schema::new(fields))
}

/// Every row of `op`'s state at version `version` (what batch `version`
/// left, committed), of its [`StateOperator::view`], rebuilt from `store` partition by partition in the
/// query's latest state generation. A generation that has no files at
/// its start yet (a query rescaled and stopped before its first batch)
/// is rebuilt from the one before, and its start snapshots written, as
/// the first batch's reduce tasks would write them.
pub async fn read(
    store: &StateStore,
    op: &StateOperator,
    version: u64,
    lineage: &Lineage,
) -> Result<Vec<RecordBatch>, ExecutorError> {
    let states = States::new(LocalConfig {
        dir: None,
        memory_bytes: MEMORY_BYTES,
    });
    let generation = lineage.rescales.last().map_or(0, |r| r.generation);
    let store = store.in_generation(generation);
    let place = Place {
        store: &store,
        operator: &op.name,
        rescales: &lineage.rescales,
        schema: op.schema.clone(),
        keys: op.keys,
        stamped: op.stamped,
    };
    let mut rows = Vec::with_capacity(lineage.partitions as usize);
    for p in 0..lineage.partitions {
        let (table, _) = rescale::load(&states, &place, p, version, op.router.as_ref()).await?;
        let scanned = table.scan()?;
        let viewed = RecordBatch::try_new(op.view.clone(), scanned.columns().to_vec())
            .map_err(|e| ExecutorError::TaskPanicked(format!("the state's view: {e}")))?;
        rows.push(viewed);
    }
    Ok(rows)
}

#[cfg(test)]
#[path = "inspect_tests.rs"]
mod tests;
