//! Queries: submitting, loading from the checkpoint, stopping, and running.
//!
//! ```text
//!  submit ─► paths allowed ─► source schema, SQL checked ─► sources/… ─► spec.json ─► metadata ─► runner
//!  (all create-only; `metadata` is written last and marks a complete submit)
//!  leader start ─► list queries/ ─► stopped? STOPPED : runner (recovery first)
//! ```

pub mod attempts;
pub mod batch;
pub mod cleanup;
pub mod conflict;
pub mod ctx;
pub mod entry;
pub mod history;
mod join;
pub mod outcome;
pub mod paths;
pub mod registry;
pub mod retention;
pub mod retry;
pub mod runner;
pub mod stages;
pub mod summary;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use sluice_common::Error as CommonError;
use sluice_common::checkpoint::{
    Log, QueryMetadata, RECORD_VERSION, Record, StopRecord, TableSchema,
};
use sluice_common::sink::FileSink;
use sluice_common::spec::OutputMode;
use sluice_common::spec::QuerySpec;
use sluice_common::storage::{Stores, check_sink_location, overlap_resolved};
use sluice_common::time::now_ms;
use tracing::{error, info, warn};

use crate::error::DriverError;
use crate::lifecycle::QueryState;
use crate::state::{Driver, Term};
use entry::QueryEntry;

/// Loads every query under the checkpoint root into `term` and starts the
/// runners of those that are not stopped. A query whose files cannot be
/// read is listed as FAILED with the file named; the others run on.
pub async fn load_all(driver: &Arc<Driver>, term: &Arc<Term>) -> Result<(), DriverError> {
    for name in driver.checkpoint.query_names().await? {
        let qc = driver.checkpoint.query(&name);
        let loaded = async {
            let meta = qc.metadata().await?;
            let spec = qc.spec().await;
            let stopped = qc.exists(Record::Stopped).await?;
            let planned = qc.latest(Log::Offsets).await?.is_some();
            let failure = qc.failure().await?;
            Ok::<_, CommonError>((meta, spec, stopped, planned, failure))
        }
        .await;
        let stop = term.cancel.child_token();
        let entry = match loaded {
            // `metadata` is written last by a submit, and a query plans
            // batches only after it: a query that planned a batch and has
            // no metadata is damaged, not an interrupted submit.
            Ok((None, _, _, true, _)) => {
                let err = format!("missing checkpoint file {}", qc.describe(Record::Metadata));
                failed_entry(name.clone(), name, term, err)
            }
            Ok((None, _, _, false, _)) => {
                warn!(query = %name, "no metadata: an interrupted submit; skipped");
                continue;
            }
            Ok((Some(meta), Ok(Some(spec)), stopped, _, failure)) => {
                let state = if stopped {
                    QueryState::Stopped
                } else {
                    QueryState::Running
                };
                let id = meta.id.to_string();
                let e = QueryEntry::new(id, name, Some(spec), term.epoch, state, stop);
                // Invariant: a FAILED query stays FAILED until resubmitted.
                if let Some(f) = failure.filter(|_| !stopped) {
                    e.transition(QueryState::Failed, Some(f.error));
                }
                e
            }
            Ok((Some(meta), spec, _, _, _)) => {
                let err = match spec {
                    Err(e) => e.to_string(),
                    _ => format!("missing checkpoint file {}", qc.describe(Record::Spec)),
                };
                failed_entry(meta.id.to_string(), name, term, err)
            }
            Err(e) => failed_entry(name.clone(), name, term, e.to_string()),
        };
        let entry = Arc::new(entry);
        term.queries.insert(entry.clone());
        if entry.spec.is_some() {
            history::spawn_restore(term, entry.clone(), qc);
        } else {
            entry.restore(Vec::new());
        }
        if entry.state() == QueryState::Running {
            runner::spawn(driver.clone(), term.clone(), entry);
        }
    }
    Ok(())
}

fn failed_entry(id: String, name: String, term: &Term, error: String) -> QueryEntry {
    error!(query = %name, error = %error, "query cannot be loaded");
    let e = QueryEntry::new(
        id,
        name,
        None,
        term.epoch,
        QueryState::Running,
        term.cancel.child_token(),
    );
    e.transition(QueryState::Failed, Some(error));
    e
}

/// Plans the query's SQL over its input tables, as every task will: a
/// query that cannot run is refused at submit, naming why.
async fn check_sql(
    spec: &QuerySpec,
    streams: &[(String, SchemaRef)],
    tables: &BTreeMap<String, TableSchema>,
    budget: std::time::Duration,
) -> Result<(), DriverError> {
    let tables: Vec<(String, SchemaRef)> = tables
        .iter()
        .map(|(n, t)| (n.clone(), Arc::new(t.schema.clone())))
        .collect();
    let checked = sluice_sql::check(spec.sql(), streams, &tables, budget)
        .await
        .map_err(|e| match e {
            sluice_sql::SqlError::Busy(_) => DriverError::Busy(format!("field `sql`: {e}")),
            sluice_sql::SqlError::Panicked(_) => DriverError::Internal(format!("field `sql`: {e}")),
            e => DriverError::Invalid(format!("field `sql`: {e}")),
        })?;
    check_chain(spec, &checked)?;
    check_event_time(spec, streams, &checked)?;
    for op in &checked.ops {
        if let Some(join) = &op.join {
            join::check(spec, join, op.consumer.is_none())?;
        }
    }
    check_partition_by(spec, &checked.output)
}

/// Each operator that feeds another emits each of its rows once, final,
/// as the next one needs: a join, or an aggregation over an event-time
/// window whose groups the watermark closes. An aggregation without a
/// window changes its groups, and a top-N its ranks, so either is refused
/// anywhere but last, naming both operators.
fn check_chain(spec: &QuerySpec, checked: &sluice_sql::Checked) -> Result<(), DriverError> {
    let ops = &checked.ops;
    for op in ops {
        let Some((next, _)) = op.consumer else {
            continue;
        };
        let feeds = format!("`{}` feeds `{}`", op.name, ops[next].name);
        let why = match op.kind {
            sluice_sql::Kind::Join => continue,
            sluice_sql::Kind::Aggregate if op.windowed && spec.has_watermark() => continue,
            sluice_sql::Kind::Aggregate if op.windowed => format!(
                "the aggregation {feeds}, so it emits each window once, when the watermark passes its end: the query needs a watermark"
            ),
            sluice_sql::Kind::Aggregate => format!(
                "the aggregation {feeds}, so it must emit each group once, final: group by an event-time window (window, hop, date_bin or session_window) with a watermark on its column; without one its groups change with every batch"
            ),
            sluice_sql::Kind::TopN => format!(
                "the top-N {feeds}, but a top-N's ranks change as rows arrive: it can only be the last stateful operator"
            ),
        };
        return Err(DriverError::Invalid(format!("field `sql`: {why}")));
    }
    Ok(())
}

/// Each watermark names a timestamp column of its input table.
fn check_watermarks(spec: &QuerySpec, streams: &[(String, SchemaRef)]) -> Result<(), DriverError> {
    for (input, (_, schema)) in spec.inputs().iter().zip(streams) {
        let Some(w) = input.watermark else { continue };
        let field = match spec.source {
            Some(_) => "watermark.column".to_string(),
            None => format!("watermarks.{}.column", input.name),
        };
        let Ok(column) = schema.field_with_name(&w.column) else {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(DriverError::Invalid(format!(
                "{field}: {:?} is not a column of {}; its columns are {}",
                w.column,
                input.name,
                names.join(", ")
            )));
        };
        if !matches!(column.data_type(), arrow_schema::DataType::Timestamp(_, _)) {
            return Err(DriverError::Invalid(format!(
                "{field}: {:?} is {}, not a timestamp",
                w.column,
                column.data_type()
            )));
        }
    }
    Ok(())
}

/// The watermarks name timestamp columns, and the output mode fits the
/// query, as in Spark: `complete` needs an aggregation, and `append` of an
/// aggregation needs a watermark and an event-time window over its
/// column, without which no group is ever final.
fn check_event_time(
    spec: &QuerySpec,
    streams: &[(String, SchemaRef)],
    checked: &sluice_sql::Checked,
) -> Result<(), DriverError> {
    check_watermarks(spec, streams)?;
    let stateful = checked.keys.is_some() || checked.top_n.is_some();
    if let Some(d) = &spec.dedup {
        check_dedup(spec, d, checked)?;
    }
    match spec.output_mode {
        Some(OutputMode::Complete) if !stateful => Err(DriverError::Invalid(
            "output_mode: complete needs an aggregation (GROUP BY or SELECT DISTINCT) or a top-N; this query keeps no state".into(),
        )),
        Some(OutputMode::Append) if checked.ops.len() > 1 => append_of_chain(spec, checked),
        Some(OutputMode::Append) if stateful => {
            let columns: Vec<&str> = spec
                .inputs()
                .iter()
                .filter_map(|i| Some(i.watermark?.column.as_str()))
                .collect();
            let window = checked.window.as_deref();
            // The window's column, when an input's watermark is over it.
            let watermark = window
                .filter(|c| columns.contains(c))
                .or(columns.first().copied());
            match (watermark, window) {
                (Some(w), Some(c)) if w == c => Ok(()),
                (None, _) => Err(DriverError::Invalid(
                    "output_mode: append needs a watermark (watermark: {column, delay_ms}) and an event-time window in GROUP BY (or a top-N's PARTITION BY), so that a group is emitted once, when it is final; use update or complete".into(),
                )),
                (Some(w), None) => Err(DriverError::Invalid(format!(
                    "output_mode: append needs GROUP BY window({w}, ...) (or hop, or date_bin; or in a top-N's PARTITION BY) over the watermark column, so that a group is emitted once, when the watermark passes its end"
                ))),
                (Some(w), Some(c)) => Err(DriverError::Invalid(format!(
                    "output_mode: append needs the window over the watermark column {w:?}, not {c:?}"
                ))),
            }
        }
        _ => Ok(()),
    }
}

/// Append mode of operators that feed each other: the last one emits each
/// row once, final: a join, or a group of an event-time window (its key
/// the window of the operator that feeds it) that the watermark closes.
fn append_of_chain(spec: &QuerySpec, checked: &sluice_sql::Checked) -> Result<(), DriverError> {
    let last = checked.ops.last().expect("a chain has operators");
    match last.kind {
        sluice_sql::Kind::Join => Ok(()),
        _ if last.windowed && spec.has_watermark() => Ok(()),
        _ => Err(DriverError::Invalid(format!(
            "output_mode: append needs the last stateful operator, `{}`, to group by an event-time window (window, hop, date_bin or session_window, or the window column of the operator feeding it) with a watermark, so that a group is emitted once, when the watermark passes its end",
            last.name
        ))),
    }
}

/// A deduplicating query is stateless SQL whose output has the key
/// columns and the watermark column; it emits each row once (append).
fn check_dedup(
    spec: &QuerySpec,
    dedup: &sluice_common::spec::DedupSpec,
    checked: &sluice_sql::Checked,
) -> Result<(), DriverError> {
    if !checked.ops.is_empty() {
        return Err(DriverError::Invalid(
            "dedup: the query has a stateful operator (an aggregation, a join of streams or a top-N); dedup removes duplicate rows of a query without one (use SELECT DISTINCT to deduplicate groups)".into(),
        ));
    }
    let names: Vec<&str> = checked
        .output
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    for (i, c) in dedup.columns.iter().enumerate() {
        if !names.contains(&c.as_str()) {
            return Err(DriverError::Invalid(format!(
                "dedup.columns[{i}]: {c:?} is not an output column of the query; its columns are {}",
                names.join(", ")
            )));
        }
    }
    if let Some(w) = &spec.watermark
        && !names.contains(&w.column.as_str())
    {
        return Err(DriverError::Invalid(format!(
            "dedup: the watermark column {:?} must be an output column of the query, which gives each key its event time; its columns are {}",
            w.column,
            names.join(", ")
        )));
    }
    if matches!(spec.output_mode, Some(m) if m != OutputMode::Append) {
        return Err(DriverError::Invalid(
            "output_mode: dedup emits each row once, in append mode".into(),
        ));
    }
    Ok(())
}

/// The sink's `partition_by` names output columns, and leaves at least
/// one for the files.
fn check_partition_by(spec: &QuerySpec, output: &SchemaRef) -> Result<(), DriverError> {
    let sluice_common::spec::SinkSpec::Files(sink) = &spec.sink else {
        return Ok(());
    };
    for (i, c) in sink.partition_by.iter().enumerate() {
        let Ok(field) = output.field_with_name(c) else {
            let names: Vec<&str> = output.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(DriverError::Invalid(format!(
                "sink.files.partition_by[{i}]: {c:?} is not an output column of the query; its columns are {}",
                names.join(", ")
            )));
        };
        if field.data_type().is_nested() {
            return Err(DriverError::Invalid(format!(
                "sink.files.partition_by[{i}]: column {c:?} is {}, not a scalar type",
                field.data_type()
            )));
        }
    }
    if !sink.partition_by.is_empty() && sink.partition_by.len() >= output.fields().len() {
        return Err(DriverError::Invalid(
            "sink.files.partition_by: names every output column; the files need at least one"
                .into(),
        ));
    }
    Ok(())
}

/// Submits a new query: writes its checkpoint and starts its runner.
pub async fn submit(
    driver: &Arc<Driver>,
    term: &Arc<Term>,
    spec: QuerySpec,
) -> Result<Arc<QueryEntry>, DriverError> {
    let stores = &driver.config.stores;
    let _guard = term.queries.submit_lock.lock().await;
    term.fence()?;
    if let Some(existing) = term.queries.get(&spec.name) {
        let old = existing.spec.as_ref();
        if existing.state() == QueryState::Failed && old == Some(&spec) {
            return resubmit_failed(driver, term, &existing).await;
        }
        return Err(conflict::conflict(&driver.config, &spec, old, existing.state()).await);
    }
    let others: Vec<(String, String)> = term
        .queries
        .list()
        .iter()
        .filter_map(|e| Some((e.name.clone(), e.spec.as_ref()?.sink_path()?.to_string())))
        .collect();
    paths::check(&driver.config.allowed_paths, &spec).await?;
    let (checked, root) = (spec.clone(), driver.config.checkpoint_root.clone());
    tokio::task::spawn_blocking(move || check_sink(&checked, &others, &root))
        .await
        .map_err(|e| DriverError::Internal(format!("the check of the sink panicked: {e}")))??;
    if let Some(sink) = spec.sink_path() {
        probe_sink(stores, sink).await?;
    }
    let streams = crate::source::resolve_schemas(stores, &spec).await?;
    let tables = crate::source::tables::resolve(stores, &spec).await?;
    check_sql(&spec, &streams, &tables, driver.config.sql_plan_budget).await?;
    let qc = driver.checkpoint.query(&spec.name);
    if let Some(old) = qc.spec().await? {
        // Same spec and no metadata: an interrupted submit, which this one completes.
        if old != spec || qc.metadata().await?.is_some() {
            return Err(
                conflict::conflict(&driver.config, &spec, Some(&old), QueryState::Running).await,
            );
        }
    }
    crate::source::create(&qc, &spec, &streams, term.epoch).await?;
    crate::source::tables::create(&qc, tables, term.epoch).await?;
    let (stored, _) = qc.create(Record::Spec, &spec).await?;
    if stored != spec {
        return Err(
            conflict::conflict(&driver.config, &spec, Some(&stored), QueryState::Running).await,
        );
    }
    let meta = QueryMetadata {
        version: RECORD_VERSION,
        id: uuid::Uuid::new_v4(),
        name: spec.name.clone(),
        created_ms: now_ms(),
        epoch: term.epoch,
    };
    let (meta, created) = qc.create(Record::Metadata, &meta).await?;
    if !created {
        return Err(DriverError::AlreadyExists(format!(
            "query {:?} already exists",
            spec.name
        )));
    }
    info!(query = %spec.name, id = %meta.id, epoch = term.epoch, "query submitted");
    let entry = Arc::new(QueryEntry::new(
        meta.id.to_string(),
        spec.name.clone(),
        Some(spec),
        term.epoch,
        QueryState::Running,
        term.cancel.child_token(),
    ));
    // A new query has no history to read back.
    entry.restore(Vec::new());
    term.queries.insert(entry.clone());
    runner::spawn(driver.clone(), term.clone(), entry.clone());
    Ok(entry)
}

/// Runs a FAILED query again from its checkpoint, submitted again with
/// the same spec: its failure marker is removed first, so a new leader
/// runs it too.
async fn resubmit_failed(
    driver: &Arc<Driver>,
    term: &Arc<Term>,
    failed: &QueryEntry,
) -> Result<Arc<QueryEntry>, DriverError> {
    let qc = driver.checkpoint.query(&failed.name);
    qc.clear_failure().await?;
    let entry = Arc::new(QueryEntry::new(
        failed.id.clone(),
        failed.name.clone(),
        failed.spec.clone(),
        term.epoch,
        QueryState::Running,
        term.cancel.child_token(),
    ));
    info!(query = %entry.name, epoch = term.epoch, "FAILED query resubmitted");
    term.queries.insert(entry.clone());
    history::spawn_restore(term, entry.clone(), qc);
    runner::spawn(driver.clone(), term.clone(), entry.clone());
    Ok(entry)
}

/// Refuses a sink that can never be written (see
/// [`check_sink_location`]) or that overlaps (is, contains or lies inside)
/// another query's sink or the checkpoint root, as written or with its
/// symbolic links followed: their files would collide, or a sink would
/// write into a checkpoint. `others` are (name, sink) pairs. Reads the disk.
fn check_sink(
    spec: &QuerySpec,
    others: &[(String, String)],
    checkpoint_root: &str,
) -> Result<(), DriverError> {
    let Some(sink) = spec.sink_path() else {
        return Ok(());
    };
    check_sink_location(sink).map_err(|r| DriverError::Invalid(format!("sink.files.path: {r}")))?;
    if overlap_resolved(sink, checkpoint_root) {
        return Err(DriverError::Invalid(format!(
            "sink.files.path: {sink} overlaps the checkpoint root {checkpoint_root}"
        )));
    }
    if let Some((name, other)) = others.iter().find(|(_, o)| overlap_resolved(sink, o)) {
        return Err(DriverError::Invalid(format!(
            "sink.files.path: {sink} overlaps the sink of query {name:?} ({other})"
        )));
    }
    Ok(())
}

/// Refuses a sink in an object store bucket that is missing or refuses
/// the credentials; a store that does not answer is a retryable error.
async fn probe_sink(stores: &Stores, sink: &str) -> Result<(), DriverError> {
    let invalid = |e: sluice_common::Error| match e {
        sluice_common::Error::Config(r) => DriverError::Invalid(format!("sink.files.path: {r}")),
        e => DriverError::Common(e),
    };
    stores
        .open(sink)
        .map_err(invalid)?
        .probe()
        .await
        .map_err(invalid)
}

/// Stops a query: writes the `stopped` marker, then cancels its runner.
pub async fn stop(driver: &Driver, term: &Term, key: &str) -> Result<Arc<QueryEntry>, DriverError> {
    let entry = term.queries.find(key)?;
    term.fence()?;
    if !entry.state().can_become(QueryState::Stopped) {
        return Ok(entry);
    }
    let record = StopRecord {
        version: RECORD_VERSION,
        stopped_ms: now_ms(),
        epoch: term.epoch,
    };
    driver
        .checkpoint
        .query(&entry.name)
        .create(Record::Stopped, &record)
        .await?;
    let was_failed = entry.state() == QueryState::Failed;
    entry.transition(QueryState::Stopped, None);
    entry.stop.cancel();
    // A FAILED query's runner has ended: nothing else abandons its batch.
    if was_failed
        && let Some(spec) = &entry.spec
        && let Some(path) = spec.sink_path()
        && let Ok(sink) = FileSink::open(&driver.config.stores, path)
    {
        let qc = driver.checkpoint.query(&entry.name);
        term.tasks
            .spawn(cleanup::abandon_uncommitted(sink, qc, term.epoch));
    }
    info!(query = %entry.name, epoch = term.epoch, "query stopped");
    Ok(entry)
}
