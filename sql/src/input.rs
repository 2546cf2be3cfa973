//! The stream tables of a task: each one's one partition, which the plan
//! reads once. The table the task reads has the task's input; the rest of
//! that input the task reads when the plan has ended without reading it
//! all. Every other stream table is empty.
//!
//! A plan may end before its input does: DataFusion turns a filter that is
//! never true into an empty relation, and a join with an empty table may
//! never read its other side. Every task still reads its whole input (its
//! row count proves that it read what the batch planned, its bad records
//! are found and counted), so the input is shared between the plan and
//! the task's [`crate::Output`], which reads what is left
//! ([`crate::Output::read_rest`]).
//!
//! The input is opened once the plan is made, for the columns its scans
//! read ([`TaskInput`], [`crate::stream_table`]); each scan takes its own
//! columns of the input's batches, by name.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::{Stream, StreamExt};

use crate::predicate::RowFilter;

/// An error of the input, passed through DataFusion unchanged.
pub type InputError = Box<dyn std::error::Error + Send + Sync>;

/// A task's input, read as the output is polled.
pub type InputBatches = futures::stream::BoxStream<'static, Result<RecordBatch, InputError>>;

/// A task's input, opened once its plan is made: given the columns of the
/// task's stream table that the plan reads (indexes into its schema,
/// ascending; empty when the plan reads none, only rows), the opener
/// returns batches holding at least those columns, found by name.
pub struct TaskInput(Box<dyn Opener>);

/// What opens a [`TaskInput`].
trait Opener: FnOnce(&[usize], Option<RowFilter>) -> InputBatches + Send {}

impl<F: FnOnce(&[usize], Option<RowFilter>) -> InputBatches + Send> Opener for F {}

impl TaskInput {
    pub fn new(open: impl FnOnce(&[usize]) -> InputBatches + Send + 'static) -> Self {
        TaskInput(Box::new(move |columns: &[usize], _| open(columns)))
    }

    /// An input whose opener is also given the plan's filter on the
    /// stream, which it may apply to skip rows ([`RowFilter`]).
    pub fn filtered(
        open: impl FnOnce(&[usize], Option<RowFilter>) -> InputBatches + Send + 'static,
    ) -> Self {
        TaskInput(Box::new(open))
    }

    /// No rows: for a plan made to be inspected, not run.
    pub fn empty() -> Self {
        TaskInput::new(|_: &[usize]| -> InputBatches { Box::pin(futures::stream::empty()) })
    }

    pub(crate) fn open(self, columns: &[usize], filter: Option<RowFilter>) -> InputBatches {
        (self.0)(columns, filter)
    }
}

impl From<InputBatches> for TaskInput {
    /// Batches of every column, whatever the plan reads.
    fn from(batches: InputBatches) -> Self {
        TaskInput::new(move |_| batches)
    }
}

/// A task's input, polled by whoever holds a clone: the plan, then the
/// task. Ended, it stays ended. A plan that scans the task's stream more
/// than once (a stream in two inputs of operators, a self-join) keeps the
/// batches it reads, and each scan replays them ([`SharedInput::keep`]).
#[derive(Clone)]
pub(crate) struct SharedInput(Arc<Mutex<Inner>>);

struct Inner {
    /// `None` until the plan is made and the input opened.
    input: Option<InputBatches>,
    /// The batches read so far, when they are kept for another scan.
    kept: Option<Vec<RecordBatch>>,
}

impl SharedInput {
    /// An input opened later ([`SharedInput::open`]), before the plan runs.
    pub(crate) fn pending() -> Self {
        SharedInput(Arc::new(Mutex::new(Inner {
            input: None,
            kept: None,
        })))
    }

    pub(crate) fn new(input: InputBatches) -> Self {
        let shared = Self::pending();
        shared.open(input);
        shared
    }

    /// Opens the input. Invariant: once.
    pub(crate) fn open(&self, input: InputBatches) {
        let mut inner = self.0.lock().expect("input lock poisoned");
        assert!(inner.input.is_none(), "a task's input is opened once");
        inner.input = Some(Box::pin(input.fuse()));
    }

    /// Keeps every batch read from now on, for the scans that follow.
    pub(crate) fn keep(&self) {
        let mut inner = self.0.lock().expect("input lock poisoned");
        inner.kept.get_or_insert_with(Vec::new);
    }

    /// A scan of the input from its start: the kept batches, then the
    /// rest as it is read.
    pub(crate) fn scan(&self) -> Scan {
        Scan {
            shared: self.clone(),
            at: 0,
        }
    }

    /// Reads the input to its end; the first error of the input ends it.
    pub(crate) async fn read_rest(self) -> Result<(), InputError> {
        let mut scan = self.scan();
        scan.at = usize::MAX;
        while let Some(batch) = scan.next().await {
            batch?;
        }
        Ok(())
    }
}

/// One scan of a [`SharedInput`].
pub(crate) struct Scan {
    shared: SharedInput,
    /// The next kept batch to replay; past the kept ones, the input.
    at: usize,
}

impl Stream for Scan {
    type Item = Result<RecordBatch, InputError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let shared = self.shared.clone();
        let mut inner = shared.0.lock().expect("input lock poisoned");
        if let Some(kept) = &inner.kept
            && let Some(b) = kept.get(self.at)
        {
            self.at += 1;
            return Poll::Ready(Some(Ok(b.clone())));
        }
        // Invariant: the plan is made, and the input opened, before it runs.
        let input = inner
            .input
            .as_mut()
            .expect("a task's input is opened before its plan runs");
        let next = input.as_mut().poll_next(cx);
        if let (Poll::Ready(Some(Ok(b))), Some(kept)) = (&next, inner.kept.as_mut()) {
            kept.push(b.clone());
            self.at = kept.len();
        }
        next
    }
}

/// One scan's partition of a stream table: the input's batches, as its
/// own columns.
pub(crate) struct Once {
    pub(crate) schema: SchemaRef,
    input: SharedInput,
    read: AtomicBool,
}

impl std::fmt::Debug for Once {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Once")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl Once {
    pub(crate) fn new(schema: SchemaRef, input: SharedInput) -> Self {
        Once {
            schema,
            input,
            read: AtomicBool::new(false),
        }
    }

    pub(crate) fn empty(schema: SchemaRef) -> Self {
        Once::new(schema, SharedInput::new(Box::pin(futures::stream::empty())))
    }
}

impl PartitionStream for Once {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        // Invariant: a plan that scans a stream twice keeps its input
        // (`crate::physical`), so a second scan of one that does not is a bug.
        let again = self.read.swap(true, Ordering::SeqCst);
        let kept = self
            .input
            .0
            .lock()
            .expect("input lock poisoned")
            .kept
            .is_some();
        assert!(!again || kept, "the input of a task is read once");
        let schema = self.schema.clone();
        let stream = self.input.scan().map(move |b| match b {
            Ok(b) => columns_of(b, &schema),
            Err(e) => Err(DataFusionError::External(e)),
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

/// The columns of `schema`, taken from `batch` by name. Invariant: the
/// input holds every column a scan reads ([`TaskInput`]).
fn columns_of(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, DataFusionError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| match batch.schema().index_of(f.name()) {
            Ok(i) => Ok(batch.column(i).clone()),
            Err(_) => Err(DataFusionError::Internal(format!(
                "the task's input has no column {:?}, which the plan reads",
                f.name()
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?)
}
