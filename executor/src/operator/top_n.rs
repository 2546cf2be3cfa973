//! Top-N per group (`ROW_NUMBER() OVER (PARTITION BY k ORDER BY x)`
//! filtered by `rn <= N`): the rows at ranks 1..N of each group, kept
//! batch by batch.
//!
//! ```text
//!  shuffle rows, in map order ─► their groups' keys
//!  state N-1 ─► the kept rows of those groups (ranks 1..N of each)
//!  kept ++ new rows ─► rank ─► the ranks whose row changed ─► upserts (key, rank, row)
//!  output: update   ─► the changed ranks
//!          complete ─► every kept rank
//!          append   ─► the ranks of the groups whose window the watermark closed
//! ```
//!
//! A state row is the group key (`__sluice_key_i`), the rank
//! (`__sluice_rank`), then the row; its key is (group, rank). A group's
//! rows only grow, so its ranks 1..min(rows, N) are always filled and a
//! batch's change is only upserts.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_select::take::{take, take_record_batch};
use sluice_common::spec::OutputMode;
use sluice_proto::{TaskAssignment, TopNWork};
use sluice_sql::{Graph, TopN as Ranking};

use super::{Advanced, Operator, Shuffled};
use crate::error::ExecutorError;
use crate::stage::{self, Assigned};
use crate::state::rescale::Repartition;
use crate::state::table::StateTable;

/// The column of a state row that holds its rank.
const RANK: &str = "__sluice_rank";

/// A query's top-N over the stream.
pub struct TopN {
    top: Ranking,
    mode: OutputMode,
    /// State rows: the group key, the rank, then the row.
    state: SchemaRef,
    /// How many leading columns of a state row are the group key.
    keys: usize,
}

fn fail(e: arrow_schema::ArrowError) -> ExecutorError {
    ExecutorError::TaskPanicked(format!("top-N: {e}"))
}

impl Repartition for TopN {
    /// By the `PARTITION BY` of a state row's row.
    fn route(&self, rows: &RecordBatch, partitions: u32) -> Result<Vec<u32>, ExecutorError> {
        let columns = rows.columns()[self.keys + 1..].to_vec();
        let kept = RecordBatch::try_new(self.top.row_schema(), columns).map_err(fail)?;
        let keys = self.top.keys(&kept)?;
        crate::shuffle::buckets_of(&keys, rows.num_rows(), partitions)
    }
}

impl Operator for TopN {
    type Work = TopNWork;

    async fn plan(
        task: &TaskAssignment,
        work: &TopNWork,
        _assigned: &Assigned<'_>,
        (graph, index): (&Graph, usize),
    ) -> Result<Self, ExecutorError> {
        let mode = stage::output_mode(task, work.output_mode)?;
        let top = Ranking::of(graph, index)?;
        let mut fields = top.key_fields()?;
        let keys = fields.len();
        fields.push(Field::new(RANK, DataType::UInt64, false));
        fields.extend(top.row_schema().fields().iter().map(|f| f.as_ref().clone()));
        Ok(TopN {
            state: Arc::new(Schema::new(fields)),
            keys,
            top,
            mode,
        })
    }

    fn input_schema(&self, _side: u32) -> Result<SchemaRef, ExecutorError> {
        Ok(self.top.row_schema())
    }

    fn state_schema(&self) -> (SchemaRef, usize) {
        (self.state.clone(), self.keys + 1)
    }

    fn output_schema(&self) -> SchemaRef {
        self.top.output_schema()
    }

    async fn advance(
        &self,
        state: &StateTable,
        rows: Vec<Shuffled>,
    ) -> Result<Advanced, ExecutorError> {
        let new = concat_batches(&self.top.row_schema(), &super::rows(rows)).map_err(fail)?;
        let upserts = if new.num_rows() == 0 {
            RecordBatch::new_empty(self.state.clone())
        } else {
            let (kept, ranks) = self.kept(state, &new)?;
            let candidates = concat_batches(&new.schema(), [&kept, &new]).map_err(fail)?;
            let mut before: Vec<Option<u64>> = ranks.iter().copied().map(Some).collect();
            before.resize(candidates.num_rows(), None);
            let changed = self.top.rank(&candidates, &before)?;
            self.state_rows(&candidates, &changed)?
        };
        let pending = (self.mode == OutputMode::Update).then(|| upserts.clone());
        Ok(Advanced {
            upserts,
            deletes: None,
            pending,
            retracted: None,
            unmatchable: 0,
        })
    }

    /// The ranks of groups whose window the watermark has passed are
    /// final. Complete mode keeps every group.
    fn evict(
        &self,
        state: &StateTable,
        watermark: Option<i64>,
    ) -> Result<Option<RecordBatch>, ExecutorError> {
        stage::evict_closed(state, self.top.window(), watermark, self.mode)
    }

    async fn emit(
        &self,
        advanced: Advanced,
        evicted: RecordBatch,
        state: &StateTable,
    ) -> Result<Vec<RecordBatch>, ExecutorError> {
        let emitted = stage::emitted(self.mode, advanced.pending, evicted, state)?;
        if emitted.num_rows() == 0 {
            return Ok(Vec::new());
        }
        let rows = emitted.project(&self.row_columns()).map_err(fail)?;
        let ranks = emitted
            .column(self.keys)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| ExecutorError::TaskPanicked("a rank that is not UInt64".into()))?
            .clone();
        let ranked = self.top.ranked(&rows, ranks)?;
        Ok(self.top.finish(vec![ranked]).await?)
    }
}

impl TopN {
    /// The indices of a state row's row columns.
    fn row_columns(&self) -> Vec<usize> {
        (self.keys + 1..self.state.fields().len()).collect()
    }

    /// The kept rows of the groups of `new` (their row columns), and the
    /// rank of each, in the order the groups first appear in `new`.
    fn kept(
        &self,
        state: &StateTable,
        new: &RecordBatch,
    ) -> Result<(RecordBatch, Vec<u64>), ExecutorError> {
        let keys = self.top.keys(new)?;
        let firsts = first_of_each(&keys)?;
        let limit = self.top.limit();
        // Each group once per rank 1..N: the state keys it may hold.
        let per_rank: UInt32Array = firsts
            .iter()
            .flat_map(|&i| std::iter::repeat_n(i, limit as usize))
            .collect();
        let mut probe: Vec<ArrayRef> = keys
            .iter()
            .map(|k| take(k, &per_rank, None))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        let ranks: UInt64Array = (0..firsts.len()).flat_map(|_| 1..=limit).collect();
        probe.push(Arc::new(ranks));
        let fields: Vec<Field> = self.state.fields()[..=self.keys]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let probe = RecordBatch::try_new(Arc::new(Schema::new(fields)), probe).map_err(fail)?;
        let (found, _) = state.lookup(&[probe])?;
        let ranks = found
            .column(self.keys)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| ExecutorError::TaskPanicked("a rank that is not UInt64".into()))?
            .values()
            .to_vec();
        let rows = found.project(&self.row_columns()).map_err(fail)?;
        Ok((rows, ranks))
    }

    /// State rows for the ranks that changed: each row's group key, its
    /// rank, then the row.
    fn state_rows(
        &self,
        candidates: &RecordBatch,
        changed: &[(u32, u64)],
    ) -> Result<RecordBatch, ExecutorError> {
        let at: UInt32Array = changed.iter().map(|(i, _)| *i).collect();
        let rows = take_record_batch(candidates, &at).map_err(fail)?;
        let mut columns = self.top.keys(&rows)?;
        columns.push(Arc::new(
            changed.iter().map(|(_, r)| *r).collect::<UInt64Array>(),
        ));
        columns.extend(rows.columns().iter().cloned());
        RecordBatch::try_new(self.state.clone(), columns).map_err(fail)
    }
}

/// The index of the first row of each distinct key of `keys`, in order.
fn first_of_each(keys: &[ArrayRef]) -> Result<Vec<u32>, ExecutorError> {
    let fields = keys
        .iter()
        .map(|k| SortField::new(k.data_type().clone()))
        .collect();
    let rows = RowConverter::new(fields)
        .and_then(|c| c.convert_columns(keys))
        .map_err(fail)?;
    let mut seen = std::collections::HashSet::new();
    Ok((0..rows.num_rows() as u32)
        .filter(|&i| seen.insert(rows.row(i as usize)))
        .collect())
}
