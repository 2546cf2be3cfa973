//! Why a submit collides with a query that exists: the same spec again
//! (ALREADY_EXISTS), or a different one over the same checkpoint
//! (FAILED_PRECONDITION, naming each field that differs and, for a
//! stateful query, a grouping key that changed).

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
