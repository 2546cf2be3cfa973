//! Event time in a map task: the latest event time of the input, and the
//! rows older than the batch's watermark, dropped and counted before the
//! query sees them. A row whose event time is null is never late.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};

use crate::counter::Counter;
use crate::error::ExecutorError;

/// The event time column of a task's input and its batch's watermark.
#[derive(Debug, Clone)]
pub struct LateFilter {
    column: usize,
    watermark: Option<i64>,
    /// Rows dropped as late.
    pub dropped: Counter,
    max: Arc<AtomicI64>,
}

impl LateFilter {
    /// The filter of `column` in `schema`, which must be a timestamp.
    pub fn new(schema: &SchemaRef, column: &str, watermark: Option<i64>) -> Result<Self, String> {
        let (i, f) = schema
            .column_with_name(column)
            .ok_or_else(|| format!("the watermark column {column:?} is not a column of input"))?;
        if !matches!(f.data_type(), DataType::Timestamp(_, _)) {
            return Err(format!(
                "the watermark column {column:?} is {}, not a timestamp",
                f.data_type()
            ));
        }
        Ok(LateFilter {
            column: i,
            watermark,
            dropped: Counter::default(),
            max: Arc::new(AtomicI64::new(i64::MIN)),
        })
    }

    /// The event time column, as an index into the schema the filter was
    /// made for.
    pub fn column(&self) -> usize {
        self.column
    }

    /// The same filter over batches of `columns` of that schema, which
    /// hold its event time. Invariant: they do.
    pub fn within(self, columns: &[usize]) -> Self {
        let column = columns
            .iter()
            .position(|&c| c == self.column)
            .expect("the columns read hold the event time");
        LateFilter { column, ..self }
    }

    /// The latest event time seen, in milliseconds.
    pub fn max_event_time_ms(&self) -> Option<i64> {
        Some(self.max.load(Ordering::Acquire)).filter(|m| *m != i64::MIN)
    }

    /// `batch` without its late rows; notes its latest event time.
    pub fn apply(&self, batch: RecordBatch) -> Result<RecordBatch, ExecutorError> {
        let fail =
            |e: arrow_schema::ArrowError| ExecutorError::TaskPanicked(format!("event time: {e}"));
        let ms = arrow_cast::cast(
            batch.column(self.column),
            &DataType::Timestamp(TimeUnit::Millisecond, None),
        )
        .map_err(fail)?;
        let ms = ms.as_primitive::<TimestampMillisecondType>();
        if let Some(m) = ms.iter().flatten().max() {
            self.max.fetch_max(m, Ordering::AcqRel);
        }
        let Some(wm) = self.watermark else {
            return Ok(batch);
        };
        let keep: BooleanArray = ms.iter().map(|t| Some(t.is_none_or(|t| t >= wm))).collect();
        let late = keep.false_count();
        if late == 0 {
            return Ok(batch);
        }
        self.dropped.add(late as u64);
        arrow_select::filter::filter_record_batch(&batch, &keep).map_err(fail)
    }
}
