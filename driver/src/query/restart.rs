//! Restarting a STOPPED query by submitting it again: with the spec it
//! ran with, or with other `state_partitions`, which begins a new state
//! generation (`rescales/<G>`), repartitioned from the last committed
//! state by the reduce tasks of its first batch.
//!
//! ```text
//!  submit(stopped) ─► its runner has ended (it abandoned the uncommitted batch)
//!    ─► the uncommitted batch's abandoned sink manifest removed
//!    ─► only state_partitions differ? ─► rescales/<G> ─► that batch's shuffle files removed
//!    ─► `stopped` removed ─► runner (recovery re-runs the batch)
//! ```
//!
//! Every step is idempotent, and `stopped` goes last: a restart cut short
//! leaves a STOPPED query, which submitting again restarts.

use std::sync::Arc;

use sluice_common::checkpoint::query_location;
use sluice_common::checkpoint::{Log, QueryCheckpoint, RECORD_VERSION, RescaleRecord};
use sluice_common::spec::QuerySpec;
use sluice_common::state::StateStore;
use sluice_common::time::now_ms;
use tracing::info;

use super::entry::QueryEntry;
use super::history;
use crate::batch_loop::runner;
use crate::error::DriverError;
use crate::lifecycle::QueryState;
use crate::state::{Driver, Term};

/// How long a restart waits for the stopped query's runner to end.
const RUNNER_END: std::time::Duration = std::time::Duration::from_secs(20);

/// How a spec submitted again differs from the one a query ran with:
/// `Some(None)`, not at all; `Some(Some((from, to)))`, only in its state
/// partitions; `None`, otherwise.
pub fn change(old: &QuerySpec, new: &QuerySpec) -> Option<Option<(u32, u32)>> {
    let (from, to) = (old.state_partitions(), new.state_partitions());
    let mut old = old.clone();
    let mut new = new.clone();
    old.state_partitions = Some(from);
    new.state_partitions = Some(from);
    (old == new).then_some((from != to).then_some((from, to)))
}

/// Runs the STOPPED query `stopped` again with `spec`; `rescale` is its
/// change of state partitions (see [`change`]).
pub async fn restart(
    driver: &Arc<Driver>,
    term: &Arc<Term>,
    stopped: &QueryEntry,
    spec: QuerySpec,
    rescale: Option<(u32, u32)>,
) -> Result<Arc<QueryEntry>, DriverError> {
    // The stopped runner abandons its uncommitted batch as it ends: that
    // must come before this restart reopens the batch, not after.
    if !stopped.runner_ended(RUNNER_END).await {
        return Err(DriverError::Busy(format!(
            "query {:?}: its stopped runner is still ending; submit it again",
            stopped.name
        )));
    }
    let qc = driver.checkpoint.query(&stopped.name);
    let committed = qc.latest(Log::Commits).await?;
    let uncommitted = qc
        .latest(Log::Offsets)
        .await?
        .filter(|&n| Some(n) != committed);
    // The batch the stop abandoned may commit after all: its abandoned
    // sink manifest goes; a real one (its commit had written it) stays.
    let written = match uncommitted {
        Some(batch) => crate::sink::reopen(&driver.config, &qc, &spec.sink, batch).await?,
        None => false,
    };
    if let Some((from, to)) = rescale {
        refuse_rescale(&stopped.name, uncommitted, written)?;
        let generation = qc.rescales().await?.last().map_or(0, |r| r.generation) + 1;
        let record = RescaleRecord {
            version: RECORD_VERSION,
            generation,
            state_version: committed,
            previous_partitions: from,
            partitions: to,
            epoch: term.epoch,
            rescaled_ms: now_ms(),
        };
        qc.write_rescale(&record).await?;
        // The uncommitted batch runs again, shuffled by the new partitions.
        if let Some(batch) = uncommitted {
            let location = query_location(&driver.config.checkpoint_root, &stopped.name);
            StateStore::open(&driver.config.stores, &location)?
                .remove_shuffle(batch)
                .await?;
        }
        info!(query = %stopped.name, from, to, generation, state_version = committed, "state partitions rescaled");
    }
    qc.clear_stopped().await?;
    let entry = run_again(driver, term, stopped, Some(spec), qc);
    info!(query = %entry.name, epoch = term.epoch, "STOPPED query restarted");
    Ok(entry)
}

/// A new RUNNING entry for the query `old` was, with `spec`, whose
/// history is read back from `qc` while its runner starts.
pub fn run_again(
    driver: &Arc<Driver>,
    term: &Arc<Term>,
    old: &QueryEntry,
    spec: Option<QuerySpec>,
    qc: QueryCheckpoint,
) -> Arc<QueryEntry> {
    let entry = Arc::new(QueryEntry::new(
        old.id.clone(),
        old.name.clone(),
        spec,
        term.epoch,
        QueryState::Running,
        term.cancel.child_token(),
    ));
    let was = old.view();
    entry.set_committed(was.last_committed_batch, was.committed_rows);
    term.queries.insert(entry.clone());
    history::spawn_restore(term, entry.clone(), qc);
    runner::spawn(driver.clone(), term.clone(), entry.clone());
    entry
}

/// Refuses to rescale the query `name` when its uncommitted batch had
/// already `written` its output (a real sink manifest, or its Kafka
/// transactions recorded; see [`crate::sink::reopen`]): that batch commits
/// as it ran, with the partitions it ran with.
fn refuse_rescale(name: &str, uncommitted: Option<u64>, written: bool) -> Result<(), DriverError> {
    match uncommitted {
        Some(batch) if written => Err(DriverError::FailedPrecondition(format!(
            "query {name:?}: batch {batch} wrote its output but had not committed when the query \
             stopped; submit it with its state_partitions unchanged to commit that batch, stop \
             it, then change state_partitions"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(partitions: Option<u32>, sql: &str) -> QuerySpec {
        let yaml = format!(
            "name: q\nsource: {{rate: {{rows_per_second: 10, partitions: 1}}}}\nsql: \"{sql}\"\n\
             sink: {{files: {{path: /tmp/out}}}}\n{}",
            partitions.map_or(String::new(), |p| format!("state_partitions: {p}\n"))
        );
        QuerySpec::parse(&yaml).unwrap()
    }

    #[test]
    fn only_state_partitions_may_change_at_a_restart() {
        let sql = "SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3";
        let four = spec(Some(4), sql);
        assert_eq!(change(&four, &four), Some(None));
        assert_eq!(change(&four, &spec(Some(12), sql)), Some(Some((4, 12))));
        let default = spec(None, sql);
        let same = spec(Some(default.state_partitions()), sql);
        assert_eq!(change(&default, &same), Some(None));
        let other = spec(
            Some(4),
            "SELECT value % 5 AS k, count(*) AS n FROM input GROUP BY value % 5",
        );
        assert_eq!(change(&four, &other), None);
    }

    #[test]
    fn a_batch_that_wrote_its_output_refuses_a_rescale_until_it_commits() {
        let refused = refuse_rescale("q", Some(7), true).unwrap_err();
        assert!(matches!(refused, DriverError::FailedPrecondition(_)));
        let text = refused.to_string();
        assert!(text.contains("\"q\"") && text.contains("batch 7"), "{text}");
        assert!(text.contains("state_partitions unchanged"), "{text}");
        refuse_rescale("q", Some(7), false)
            .expect("an uncommitted batch that wrote nothing runs again");
        refuse_rescale("q", None, false).expect("nothing uncommitted");
    }
}
