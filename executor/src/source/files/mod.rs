//! The file source's reader: a task's byte ranges of source files, read
//! through storage and decoded to the query's `input` schema.
//!
//! ```text
//!  for each range: head(file) ── size differs / gone ──► fatal error (the query fails)
//!        │
//!        ├─ jsonl, csv: read the range's whole lines ─► lines::Decoded ─► batches
//!        └─ parquet:    footer ─► row groups whose middle is in the range ─► batches
//! ```
//!
//! A malformed record fails the task (fatal), naming the file and line (or
//! row group), unless the spec says `on_bad_record: skip`: then it is
//! counted in `bad_records`.

pub(crate) mod lines;
mod parquet;
#[cfg(test)]
mod projection_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::StreamExt;
use sluice_common::spec::{CsvOptions, Format};
use sluice_common::storage::{Storage, Stores};
use sluice_proto::{FileRange, FilesTask};

use super::{Batches, Columns, ReadCounters, SourceReader};
use crate::counter::Counter;
use crate::error::ExecutorError;
use lines::{Decoded, LineFormat};

/// How much more of a file to read, at a time, to find the end of a
/// range's last line.
const TAIL_STEP: u64 = 64 << 10;

pub struct FilesReader {
    task: FilesTask,
    stores: Stores,
    format: Format,
    schema: SchemaRef,
    /// The query's filter, which a Parquet read applies.
    filter: Option<sluice_sql::RowFilter>,
}

impl FilesReader {
    pub fn new(task: FilesTask, schema: SchemaRef, stores: Stores) -> Result<Self, ExecutorError> {
        let bad = |m: String| Err(ExecutorError::MalformedTask(format!("file source: {m}")));
        let Some(format) = Format::parse(&task.format) else {
            return bad(format!("unknown format {:?}", task.format));
        };
        if task.root.is_empty() {
            return bad("missing root".into());
        }
        if let Some(r) = task
            .ranges
            .iter()
            .find(|r| r.start >= r.end || r.end > r.size)
        {
            return bad(format!(
                "range {}..{} of {} is not in its file",
                r.start, r.end, r.path
            ));
        }
        Ok(FilesReader {
            task,
            stores,
            format,
            schema,
            filter: None,
        })
    }
}

impl SourceReader for FilesReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn planned_rows(&self) -> Option<u64> {
        None
    }

    fn filter(&mut self, filter: sluice_sql::RowFilter) {
        self.filter = Some(filter);
    }

    fn read(self: Box<Self>, columns: Columns, counters: ReadCounters) -> Batches {
        let ctx = Arc::new(Ctx {
            format: self.format,
            lines: LineFormat {
                format: self.format,
                schema: self.schema.clone(),
                columns: (!columns.are_all(&self.schema)).then(|| columns.indexes().to_vec()),
                csv: self
                    .task
                    .csv
                    .as_ref()
                    .map(CsvOptions::from)
                    .unwrap_or_default(),
                skip_bad: self.task.skip_bad_records,
            },
            root: self.task.root.clone(),
            stores: self.stores,
            label: if self.task.label.is_empty() {
                "source file".into()
            } else {
                self.task.label.clone()
            },
            bad_records: counters.bad_records,
            bytes_read: counters.bytes_read,
            rows_filtered: counters.rows_filtered,
            filter: self.filter,
        });
        let ranges = self.task.ranges;
        futures::stream::iter(ranges)
            .then(move |r| {
                let ctx = ctx.clone();
                async move { ctx.read_range(r).await }
            })
            .flat_map(|res| match res {
                Ok(batches) => batches,
                Err(e) => futures::stream::once(async { Err(e) }).boxed(),
            })
            .boxed()
    }
}

/// What every range of a task shares.
struct Ctx {
    format: Format,
    lines: LineFormat,
    root: String,
    stores: Stores,
    /// What the files are, in errors ("source file").
    label: String,
    bad_records: Counter,
    bytes_read: Counter,
    rows_filtered: Counter,
    filter: Option<sluice_sql::RowFilter>,
}

impl Ctx {
    fn storage(&self) -> Result<Storage, ExecutorError> {
        Ok(self.stores.open(&self.root)?)
    }

    /// Checks that the file is as planned, then reads the range.
    async fn read_range(self: Arc<Self>, r: FileRange) -> Result<Batches, ExecutorError> {
        let storage = self.storage()?;
        let name = format!("{} {}", self.label, storage.describe_str(&r.path));
        match storage.head(&r.path).await? {
            None => {
                return Err(ExecutorError::BadInput(format!(
                    "{name} vanished after the batch was planned"
                )));
            }
            Some(m) if m.size != r.size => {
                return Err(ExecutorError::BadInput(format!(
                    "{name} changed size after the batch was planned: {} bytes then, {} now",
                    r.size, m.size
                )));
            }
            Some(m) if r.modified_ms != 0 && m.modified_ms != r.modified_ms => {
                return Err(ExecutorError::BadInput(format!(
                    "{name} changed after the batch was planned: modified at {} ms then, {} ms now",
                    r.modified_ms, m.modified_ms
                )));
            }
            Some(_) => {}
        }
        match self.format {
            Format::Parquet => {
                let counters = parquet::Counters {
                    bad_records: self.bad_records.clone(),
                    bytes_read: self.bytes_read.clone(),
                    rows_filtered: self.rows_filtered.clone(),
                };
                let read = parquet::Read {
                    schema: self.lines.output_schema(),
                    filter: self.filter.clone(),
                    skip_bad: self.lines.skip_bad,
                };
                parquet::read(storage, r, read, counters, &self.label).await
            }
            Format::Jsonl | Format::Csv => self.read_lines(&storage, &r, &name).await,
        }
    }

    /// The range's whole lines, decoded.
    async fn read_lines(
        &self,
        storage: &Storage,
        r: &FileRange,
        name: &str,
    ) -> Result<Batches, ExecutorError> {
        let from = r.start.saturating_sub(1);
        let mut hi = r.size.min(r.end.saturating_add(TAIL_STEP));
        // The range as storage gives it; copied only when its last line
        // runs past what was read.
        let mut buf = storage.get_range(&r.path, from..hi).await?;
        self.bytes_read.add(hi - from);
        let Some(first) = lines::first_line(&buf, from, r.start) else {
            return Ok(futures::stream::empty().boxed());
        };
        if first as u64 + from >= r.end {
            // The first line of this range starts in the next one.
            return Ok(futures::stream::empty().boxed());
        }
        let last = loop {
            if let Some(end) = lines::line_end(&buf, from, r.end) {
                break end;
            }
            if hi == r.size {
                break buf.len();
            }
            let more = r.size.min(hi.saturating_add(TAIL_STEP.max(hi - from)));
            let mut longer = bytes::BytesMut::from(buf);
            longer.extend_from_slice(&storage.get_range(&r.path, hi..more).await?);
            buf = longer.freeze();
            self.bytes_read.add(more - hi);
            hi = more;
        };
        let body = buf.slice(first..last);
        let header = r.start == 0 && self.format == Format::Csv && self.lines.csv.header;
        let batches = decode_all(&self.lines, &body, header, &self.bad_records);
        match batches {
            Ok(b) => Ok(futures::stream::iter(b.into_iter().map(Ok)).boxed()),
            Err(bad) => {
                // The line number within the file: count the lines before
                // the range (only on this error path).
                let before = if from + first as u64 == 0 {
                    0
                } else {
                    let prefix = storage.get_range(&r.path, 0..from + first as u64).await?;
                    prefix.iter().filter(|&&b| b == b'\n').count() as u64
                };
                Err(ExecutorError::BadInput(format!(
                    "{name} line {}: {}; set on_bad_record: skip to skip such records",
                    before + bad.index + 1,
                    bad.reason
                )))
            }
        }
    }
}

/// Every batch of `body`, or the first bad line.
fn decode_all(
    fmt: &LineFormat,
    body: &[u8],
    header: bool,
    bad_records: &Counter,
) -> Result<Vec<RecordBatch>, lines::BadLine> {
    let mut d = Decoded::new(fmt, body);
    if header {
        d = d.skip_header();
    }
    let mut out = Vec::new();
    while let Some(b) = d.next_batch() {
        out.push(b?);
    }
    bad_records.add(d.bad);
    Ok(out)
}
