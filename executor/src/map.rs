//! A map task: the task's source range read through the query's SQL.
//!
//! ```text
//!  plan() (validate) ──► spawn_blocking(read + SQL + encode) ──► part files (create-only)
//!                                      │ rows == 0: no file
//!                                      ▼
//!                           TaskOutput{rows, files, input_rows}
//! ```
//!
//! A stateful query's map task goes on in [`crate::shuffle`] instead.

use std::sync::Arc;
use std::time::Instant;

use arrow_schema::SchemaRef;
use sluice_proto::{TaskAssignment, TaskOutput};

use crate::cache::Caches;
use crate::counter::Counter;
use crate::error::ExecutorError;
use crate::input::{Failure, Input};
use crate::late::LateFilter;
use crate::output::{self, Emitter};
use crate::sink::{SinkWriter, TaskOut};
use crate::source::{self, Columns, ReadCounters, SourceReader};

/// What one map task does, validated.
pub struct TaskPlan {
    pub batch_id: u64,
    pub partition: u32,
    pub source: Box<dyn SourceReader>,
    /// The query, its stream tables (reading the task's), and the schema
    /// of the task's table.
    pub sql: String,
    pub streams: sluice_sql::Streams,
    pub input_schema: SchemaRef,
    /// How long planning `sql` may take.
    pub budget: std::time::Duration,
    /// The sink's writer, and the most bytes the task may write to it.
    pub sink: Arc<dyn SinkWriter>,
    pub max_output_bytes: u64,
    /// The static tables the SQL joins with, as this batch reads them.
    pub tables: Vec<sluice_proto::TablePlan>,
    /// A query with a watermark: its event time and late rows.
    pub late: Option<LateFilter>,
}

/// Validates a map task's assignment into a plan, its source read through
/// `caches`' stores with the secrets they allow; anything missing is fatal.
pub fn plan(task: &TaskAssignment, caches: &Caches) -> Result<TaskPlan, ExecutorError> {
    let malformed = |m: String| ExecutorError::MalformedTask(format!("task {}: {m}", task.task_id));
    let query = task
        .plan
        .as_ref()
        .ok_or_else(|| malformed("missing plan".into()))?;
    let source = task
        .source
        .as_ref()
        .ok_or_else(|| malformed("missing source".into()))?;
    let table = match source.table.as_str() {
        "" => sluice_sql::INPUT,
        t => t,
    };
    let streams = crate::stage::streams(query, Some(table)).map_err(malformed)?;
    let input_schema = streams
        .reading_schema()
        .ok_or_else(|| malformed(format!("no schema of stream {table:?}")))?;
    let source = source::open(
        source,
        input_schema.clone(),
        &caches.storage,
        &caches.secrets,
    )
    .map_err(|e| malformed(e.to_string()))?;
    if input_schema != source.schema() {
        return Err(malformed(
            "the plan's input schema is not the source's".into(),
        ));
    }
    let sink = crate::sink::writer(task.sink.as_ref().unwrap_or(&Default::default()))
        .map_err(malformed)?;
    sink.check(&source.schema())
        .map_err(|e| malformed(e.to_string()))?;
    let late = match &task.event_time {
        None => None,
        Some(e) => {
            Some(LateFilter::new(&input_schema, &e.column, e.watermark_ms).map_err(malformed)?)
        }
    };
    Ok(TaskPlan {
        late,
        batch_id: task.batch_id,
        partition: task.partition,
        source,
        sql: query.sql.clone(),
        budget: sluice_sql::guard::budget_ms(query.plan_budget_ms),
        input_schema,
        streams,
        sink,
        max_output_bytes: crate::output::task_cap(query.max_output_bytes),
        tables: query.tables.clone(),
    })
}

/// Runs a stateless query's map task: its rows go to sink part files
/// (see [`crate::output`]).
pub async fn run(
    plan: TaskPlan,
    caches: Arc<Caches>,
    started: Instant,
) -> Result<TaskOutput, ExecutorError> {
    let planned = plan.source.planned_rows();
    if planned == Some(0) {
        return Ok(TaskOutput {
            duration_ms: started.elapsed().as_millis() as u64,
            ..Default::default()
        });
    }
    let (sink, partition) = (plan.sink.clone(), plan.partition);
    let (tx, rx) = output::channel();
    let runtime = tokio::runtime::Handle::current();
    let blocking = caches.clone();
    let producer = tokio::task::spawn_blocking(move || produce(plan, &runtime, tx, &blocking));
    let written = sink.write(&caches, partition, rx).await;
    let produced = producer
        .await
        .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))?;
    let (delivered, produced) = output::settle(written, produced)?;
    produced.check(planned)?;
    Ok(TaskOutput {
        rows: produced.rows,
        sink: delivered,
        duration_ms: started.elapsed().as_millis() as u64,
        input_rows: produced.input_rows,
        bad_records: produced.bad_records,
        records_lost: produced.records_lost,
        rows_dropped_by_watermark: produced.dropped,
        max_event_time_ms: produced.max_event_time_ms,
        ..Default::default()
    })
}

/// What the blocking half of a task counted.
pub(crate) struct Produced {
    pub input_rows: u64,
    pub rows: u64,
    pub bad_records: u64,
    pub records_lost: u64,
    /// Input rows older than the watermark, dropped.
    pub dropped: u64,
    pub max_event_time_ms: Option<i64>,
}

impl Produced {
    /// A task reads exactly the rows its plan has, when the plan says.
    pub fn check(&self, planned: Option<u64>) -> Result<(), ExecutorError> {
        match planned {
            Some(p) if p != self.input_rows => Err(ExecutorError::TaskPanicked(format!(
                "read {} rows of the {p} planned",
                self.input_rows
            ))),
            _ => Ok(()),
        }
    }
}

/// The task's input, as the SQL's `input` table reads it, with its
/// counters; and the static tables.
pub(crate) struct Opened {
    pub read: crate::counter::Counter,
    pub failure: crate::input::Failure,
    pub counters: ReadCounters,
    pub tables: Vec<sluice_sql::Table>,
    pub late: Option<LateFilter>,
}

impl Opened {
    /// What the task counted, once its input is read.
    pub fn produced(&self, emitted: output::Emitted) -> Produced {
        Produced {
            rows: emitted.rows,
            // The rows the source dropped by the query's filter were read.
            input_rows: self.read.get() + self.counters.rows_filtered.get(),
            bad_records: self.counters.bad_records.get(),
            records_lost: self.counters.records_lost.get(),
            dropped: self.late.as_ref().map_or(0, |l| l.dropped.get()),
            max_event_time_ms: self.late.as_ref().and_then(LateFilter::max_event_time_ms),
        }
    }
}

/// The task's input, opened by the query's plan for the columns it reads
/// (and the event time, which the late filter reads) and with its filter
/// on the stream; and the static tables.
pub(crate) fn open_input(
    source: Box<dyn SourceReader>,
    tables: &[sluice_proto::TablePlan],
    late: Option<LateFilter>,
    runtime: &tokio::runtime::Handle,
    caches: &Caches,
) -> Result<(sluice_sql::TaskInput, Opened), ExecutorError> {
    let tables = runtime.block_on(crate::cache::tables(caches, tables))?;
    let counters = ReadCounters::default();
    let (read, failure) = (Counter::default(), Failure::default());
    let opened = Opened {
        late: late.clone(),
        read: read.clone(),
        failure: failure.clone(),
        counters: counters.clone(),
        tables,
    };
    let mut source = source;
    let input = sluice_sql::TaskInput::filtered(move |wanted, filter| {
        let schema = source.schema();
        // The event time of every row, late or not, is the watermark's:
        // rows are dropped by the query's filter only without one.
        if let (Some(filter), None) = (filter, &late) {
            source.filter(filter);
        }
        let columns = Columns::of(&schema, wanted, late.as_ref().map(LateFilter::column));
        let late = late.map(|l| l.within(columns.indexes()));
        let input = Input::new(source.read(columns, counters), late, (read, failure));
        Box::pin(input)
    });
    Ok((input, opened))
}

/// The blocking half of [`run`]: reads the input through the query and
/// sends the encoded output.
fn produce(
    plan: TaskPlan,
    runtime: &tokio::runtime::Handle,
    tx: tokio::sync::mpsc::Sender<crate::sink::parts::Piece>,
    caches: &Caches,
) -> Result<Produced, ExecutorError> {
    let (input, opened) = open_input(plan.source, &plan.tables, plan.late, runtime, caches)?;
    let mut output = runtime.block_on(sluice_sql::run(
        &plan.sql,
        plan.streams,
        input,
        &opened.tables,
        caches.task_limits(plan.budget),
    ))?;
    let task = TaskOut {
        batch: plan.batch_id,
        partition: plan.partition,
    };
    let schema = output.schema();
    let mut emitter = Emitter::new(&*plan.sink, task, plan.max_output_bytes, &schema, tx)?;
    // The input's own error says whether a retry may help.
    let failed = |e: sluice_sql::SqlError| opened.failure.take().unwrap_or(e.into());
    while let Some(batch) = runtime.block_on(output.next()) {
        if !emitter.write(&batch.map_err(failed)?)? {
            return Ok(opened.produced(emitter.finish()?));
        }
    }
    runtime.block_on(output.read_rest()).map_err(failed)?;
    Ok(opened.produced(emitter.finish()?))
}
