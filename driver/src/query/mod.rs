//! Queries, their control side: submitting, loading from the checkpoint,
//! stopping, restarting, and the registry of a term's queries. Each
//! running query's batches are [`crate::batch_loop`]'s.
//!
//! ```text
//!  submit ─► sink unique, paths allowed ─► source schema, SQL checked ─► sources/… ─► spec.json ─► metadata ─► runner
//!  (all create-only; `metadata` is written last and marks a complete submit)
//!  leader start ─► list queries/ ─► stopped? STOPPED : runner (recovery first)
//!  submit(STOPPED, same spec or other state_partitions) ─► restart (see `restart`)
//! ```

mod check;
pub mod commit_gate;
pub mod conflict;
pub mod entry;
pub mod history;
mod join;
pub mod paths;
pub mod registry;
pub mod restart;

use std::sync::Arc;

use sluice_common::Error as CommonError;
use sluice_common::checkpoint::{Log, QueryMetadata, RECORD_VERSION, Record, StopRecord};
use sluice_common::spec::QuerySpec;
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
        if entry.spec.is_some() {
            history::show_committed(&entry, &qc).await;
        }
        term.queries.insert(entry.clone());
        if entry.spec.is_some() {
            history::spawn_restore(term, entry.clone(), qc);
        } else {
            entry.restore(Vec::new());
        }
        if entry.state() == QueryState::Running {
            crate::batch_loop::runner::spawn(driver.clone(), term.clone(), entry);
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
        if existing.state() == QueryState::Stopped
            && let Some(old) = old
            && let Some(rescale) = restart::change(old, &spec)
        {
            return restart::restart(driver, term, &existing, spec, rescale).await;
        }
        return Err(conflict::conflict(&driver.config, &spec, old, existing.state()).await);
    }
    let existing = term.queries.list();
    paths::check(&driver.config.allowed_paths, &spec).await?;
    paths::check_secrets(&driver.config.secrets, &spec)?;
    let others: Vec<(String, QuerySpec)> = existing
        .iter()
        .filter_map(|e| Some((e.name.clone(), e.spec.clone()?)))
        .collect();
    crate::sink::check(&driver.config, &spec, others).await?;
    let streams = crate::source::resolve_schemas(stores, &spec).await?;
    let tables = crate::source::tables::resolve(stores, &spec).await?;
    let output = check::check_sql(&spec, &streams, &tables, driver.config.sql_plan_budget).await?;
    crate::sink::check_table(&driver.config, &spec, &output).await?;
    let qc = driver.checkpoint.query(&spec.name);
    if let Some(old) = qc.spec().await? {
        // Same spec and no metadata: an interrupted submit, which this one completes.
        if old != spec || qc.metadata().await?.is_some() {
            return Err(
                conflict::conflict(&driver.config, &spec, Some(&old), QueryState::Running).await,
            );
        }
    }
    crate::source::create(&qc, &spec, &streams, &driver.config.secrets, term.epoch).await?;
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
    crate::batch_loop::runner::spawn(driver.clone(), term.clone(), entry.clone());
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
    let entry = restart::run_again(driver, term, failed, failed.spec.clone(), qc);
    info!(query = %entry.name, epoch = term.epoch, "FAILED query resubmitted");
    Ok(entry)
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
    if was_failed && let Some(spec) = entry.spec.clone() {
        let (config, epoch) = (driver.config.clone(), term.epoch);
        let qc = driver.checkpoint.query(&entry.name);
        term.tasks.spawn(async move {
            let end = crate::sink::Ended {
                config: &config,
                qc: &qc,
                epoch,
                stopped: true,
            };
            crate::sink::ended(&spec.sink, &end).await;
        });
    }
    info!(query = %entry.name, epoch = term.epoch, "query stopped");
    Ok(entry)
}
