//! A stream table of a task: a table provider that notes the columns each
//! scan reads, so that the task's input is opened for those columns only
//! (projection pushdown into the source).
//!
//! ```text
//!  plan:   optimizer ─► TableScan(projection) ─► StreamTable::scan ─► notes the columns
//!  open:   columns_read() (union of the scans'), filter() ─► TaskInput::open ─► the source reads them
//!  run:    each scan's partition projects the input's batches to its own columns, by name
//! ```
//!
//! Every scan is one [`StreamingTableExec`] of one partition, as
//! DataFusion's `StreamingTable` makes it, so the rest of the planner
//! ([`crate::Planned::streams_of`]) finds the stream a node reads the same way.

use std::sync::{Arc, Mutex};

use arrow_schema::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};

use crate::input::{Once, SharedInput};
use crate::predicate::RowFilter;

/// One stream table: the task's input, or empty for a stream the task
/// does not read.
pub(crate) struct StreamTable {
    schema: SchemaRef,
    /// The task's input; `None` for an empty stream.
    input: Option<SharedInput>,
    /// Each scan planned so far.
    scans: Mutex<Vec<Scan>>,
}

/// A planned scan: the columns it reads, the filters DataFusion pushed
/// into it (which it also applies above), and its partition.
type Scan = (Vec<usize>, Vec<Expr>, Arc<dyn PartitionStream>);

impl StreamTable {
    pub(crate) fn new(schema: SchemaRef, input: Option<SharedInput>) -> Self {
        StreamTable {
            schema,
            input,
            scans: Mutex::new(Vec::new()),
        }
    }

    /// The partitions of the scans planned so far.
    pub(crate) fn partitions(&self) -> Vec<Arc<dyn PartitionStream>> {
        let scans = self.scans.lock().expect("stream table lock poisoned");
        scans.iter().map(|(_, _, p)| p.clone()).collect()
    }

    /// The columns any planned scan reads, as indexes into the table's
    /// schema, ascending; empty when no scan reads a column.
    pub(crate) fn columns_read(&self) -> Vec<usize> {
        let scans = self.scans.lock().expect("stream table lock poisoned");
        let mut columns: Vec<usize> = scans.iter().flat_map(|(c, _, _)| c.clone()).collect();
        columns.sort_unstable();
        columns.dedup();
        columns
    }

    /// The filter a source may apply: that of the one scan, when the plan
    /// scans the table once.
    pub(crate) fn filter(&self) -> Option<RowFilter> {
        let scans = self.scans.lock().expect("stream table lock poisoned");
        match scans.as_slice() {
            [(_, filters, _)] => RowFilter::of(filters, &self.schema),
            _ => None,
        }
    }
}

impl std::fmt::Debug for StreamTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTable")
            .field("schema", &self.schema)
            .field("empty", &self.input.is_none())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl TableProvider for StreamTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        // As DataFusion's `StreamingTable`.
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Inexact: the plan filters too, whatever the source does.
        Ok(filters
            .iter()
            .map(|f| match crate::predicate::pushable(f) {
                true => TableProviderFilterPushDown::Inexact,
                false => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let schema = Arc::new(self.schema.project(&columns)?);
        let partition: Arc<dyn PartitionStream> = Arc::new(match &self.input {
            Some(input) => Once::new(schema.clone(), input.clone()),
            None => Once::empty(schema.clone()),
        });
        self.scans
            .lock()
            .expect("stream table lock poisoned")
            .push((columns, filters.to_vec(), partition.clone()));
        let exec = StreamingTableExec::try_new(schema, vec![partition], None, [], false, limit)?;
        Ok(Arc::new(exec))
    }
}
