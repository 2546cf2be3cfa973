//! A stateful query's operator: one type per operator behind one trait
//! ([`Operator`]), planned from its task's work and run by the one reduce
//! runner ([`crate::reduce`]).
//!
//! ```text
//!  plan(task, work)                    the operator, from the query's SQL and its work
//!  advance(state N-1, shuffled rows)   ─► upserts into the state, and what the batch emits
//!  evict(state rows, watermark)        ─► the state rows the watermark has passed
//!  emit(advanced, evicted, state N)    ─► the batch's output rows
//! ```
//!
//! Invariant (determinism): each step is a pure function of its inputs,
//! so a retried or rebuilt reduce task writes the same delta and the same
//! part files.

mod aggregate;
mod changes;
mod dedup;
mod join;
mod session;
mod top_n;

pub use aggregate::Aggregate;
pub use dedup::{Dedup, key_columns};
pub use join::Join;
pub use top_n::TopN;

use std::future::Future;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_proto::TaskAssignment;
use sluice_sql::Graph;

use crate::error::ExecutorError;
use crate::stage::Assigned;
use crate::state::rescale::Repartition;
use crate::state::table::{Change, StateTable};

pub use crate::stage::Shuffled;

/// The rows of `shuffled`, whatever side they are for.
pub fn rows(shuffled: Vec<Shuffled>) -> Vec<RecordBatch> {
    shuffled.into_iter().map(|s| s.rows).collect()
}

/// What one batch does to an operator's state.
#[derive(Debug)]
pub struct Advanced {
    /// State rows to upsert, by key.
    pub upserts: RecordBatch,
    /// State rows whose keys leave the state (sessions merged into
    /// another); none of them is a key of `upserts`. `None`: nothing.
    pub deletes: Option<RecordBatch>,
    /// What the batch emits whatever the watermark does; the operator's
    /// own form, finished by [`Operator::emit`].
    pub pending: Option<RecordBatch>,
    /// What the batch retracts of what earlier batches emitted (an
    /// aggregation that feeds another its changes: the state rows it
    /// replaced). `None`: nothing.
    pub retracted: Option<RecordBatch>,
    /// Input rows that can match nothing and were not held: a bounded
    /// join's rows whose event time is NULL (an outer side's emitted at
    /// once, padded with NULLs; an inner side's dropped).
    pub unmatchable: u64,
}

impl Advanced {
    /// The change to the state, before eviction.
    pub fn change(&self) -> Change {
        let none = || RecordBatch::new_empty(self.upserts.schema());
        Change {
            upserts: self.upserts.clone(),
            deletes: self.deletes.clone().unwrap_or_else(none),
        }
    }
}

/// One stateful operator of a query.
pub trait Operator: Repartition + Sized + Send + Sync {
    /// The operator's part of a task's work.
    type Work;

    /// The operator of `task`'s query, as `work` configures it: operator
    /// `index` of the query's `graph`.
    fn plan(
        task: &TaskAssignment,
        work: &Self::Work,
        assigned: &Assigned<'_>,
        graph: (&Graph, usize),
    ) -> impl Future<Output = Result<Self, ExecutorError>> + Send;

    /// The schema of the rows shuffled to its side `side`.
    fn input_schema(&self, side: u32) -> Result<SchemaRef, ExecutorError>;

    /// The schema of a state row, and how many leading columns are its key.
    fn state_schema(&self) -> (SchemaRef, usize);

    /// The names a user reads a state row's columns by (`sluice state`):
    /// the query's own names where it gives them; by default the state
    /// schema's.
    fn state_names(&self) -> Vec<String> {
        let (schema, _) = self.state_schema();
        schema.fields().iter().map(|f| f.name().clone()).collect()
    }

    /// The schema of the rows it emits.
    fn output_schema(&self) -> SchemaRef;

    /// Whether it emits changes (rows added and retracted) for the
    /// aggregation it feeds, keyed by that aggregation's group key.
    fn emits_changes(&self) -> bool {
        false
    }

    /// Folds one batch's shuffled rows (in map order, each with the
    /// stream its map task read) into `state`.
    fn advance(
        &self,
        state: &StateTable,
        rows: Vec<Shuffled>,
    ) -> impl Future<Output = Result<Advanced, ExecutorError>> + Send;

    /// The rows of `state` that the watermark has passed: they can no
    /// longer change, and leave the state. `None`: nothing is evicted
    /// (and the state is not read).
    fn evict(
        &self,
        state: &StateTable,
        watermark: Option<i64>,
    ) -> Result<Option<RecordBatch>, ExecutorError>;

    /// The batch's output: from what `advance` left pending (and
    /// retracted), the rows `evict` took, and the state the batch left.
    fn emit(
        &self,
        advanced: Advanced,
        evicted: RecordBatch,
        state: &StateTable,
    ) -> impl Future<Output = Result<Vec<RecordBatch>, ExecutorError>> + Send;
}
