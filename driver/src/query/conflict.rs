//! Why a submit collides with a query that exists: the same spec again
//! (ALREADY_EXISTS), or a different one over the same checkpoint
//! (FAILED_PRECONDITION, naming each field that differs and, for a
//! stateful query, a grouping key that changed). Only `state_partitions`
//! changed on a query that runs (or failed, and may be stopped) says to
//! stop it first: a STOPPED query submitted so is rescaled (see
//! [`super::restart`]).

use std::sync::Arc;

use sluice_common::spec::QuerySpec;

use crate::config::DriverConfig;
use crate::error::DriverError;
use crate::lifecycle::QueryState;

/// The error of submitting `new` where `old` exists (or a checkpoint whose
/// spec cannot be read, when `old` is `None`).
pub async fn conflict(
    config: &DriverConfig,
    new: &QuerySpec,
    old: Option<&QuerySpec>,
    state: QueryState,
) -> DriverError {
    let name = &new.name;
    match old {
        Some(old) if old == new => DriverError::AlreadyExists(format!(
            "query {name:?} already exists (state {})",
            state.as_str()
        )),
        Some(old)
            if state != QueryState::Finished
                && let Some((from, to)) = rescales(old, new) =>
        {
            DriverError::FailedPrecondition(format!(
                "query {name:?} is {}: state_partitions {from} -> {to} rescales its state, \
                 which only a stopped query can do; stop it first (sluice stop {name}), \
                 then submit this spec again",
                state.as_str()
            ))
        }
        Some(old) => {
            let mut what = old.diff(new);
            if old.sql() != new.sql()
                && let (Some(a), Some(b)) = (
                    grouping_key(config, old).await,
                    grouping_key(config, new).await,
                )
                && a != b
            {
                what.push(format!(
                    "the grouping key of its state: [{}] -> [{}]",
                    a.join(", "),
                    b.join(", ")
                ));
            }
            DriverError::FailedPrecondition(format!(
                "query {name:?} already has a checkpoint with a different spec: {}",
                what.join(", ")
            ))
        }
        None => DriverError::FailedPrecondition(format!(
            "query {name:?} already has a checkpoint whose spec cannot be read"
        )),
    }
}

/// The change of state partitions from `old` to `new`, when nothing else
/// changes (see [`super::restart::change`]).
fn rescales(old: &QuerySpec, new: &QuerySpec) -> Option<(u32, u32)> {
    super::restart::change(old, new).flatten()
}

/// The grouping key of a stateful query's aggregation; `None` when it
/// keeps no state or its schema cannot be resolved now.
async fn grouping_key(config: &DriverConfig, spec: &QuerySpec) -> Option<Vec<String>> {
    let stores = &config.stores;
    let streams = crate::source::resolve_schemas(stores, spec).await.ok()?;
    let tables = crate::source::tables::resolve(stores, spec).await.ok()?;
    let tables: Vec<_> = tables
        .iter()
        .map(|(n, t)| (n.clone(), Arc::new(t.schema.clone())))
        .collect();
    sluice_sql::check(spec.sql(), &streams, &tables, config.sql_plan_budget)
        .await
        .ok()?
        .keys
}
