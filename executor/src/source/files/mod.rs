//! The file source's reader: a task's byte ranges of source files, read
//! through storage and decoded to the query's `input` schema.
//!
//! ```text
//!  for each range: head(file) ── size differs / gone ──► fatal error (the query fails)
//!        │
//!        ├─ jsonl, csv: the range in chunks ─► lines::RangeLines (whole lines) ─► lines::Decoded ─► batches
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
use lines::{Decoded, LineFormat, RangeLines};

/// How much more of a file to read, at a time, to find the end of a
/// range's last line.
const TAIL_STEP: u64 = 64 << 10;

/// How much of a file is read at a time. A few MiB keep reads large
/// enough for object stores while the allocator reuses the buffers
/// (larger ones are mapped afresh, zeroed and faulted in for every read).
const CHUNK: u64 = 4 << 20;

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

    /// The range's whole lines, decoded. The file is read in chunks, two
    /// at a time, and each chunk's whole lines are decoded before the
    /// next is taken, so a range costs two chunks of memory, whatever
    /// its size, besides its batches.
    async fn read_lines(
        &self,
        storage: &Storage,
        r: &FileRange,
        name: &str,
    ) -> Result<Batches, ExecutorError> {
        let mut lines = RangeLines::new(r.start, r.end);
        let mut decoded = Bodies {
            header: r.start == 0 && self.format == Format::Csv && self.lines.csv.header,
            ..Bodies::default()
        };
        // The range, and a little more for its last line, in chunks.
        let planned = chunks(
            lines.read_from(),
            r.size.min(r.end.saturating_add(TAIL_STEP)),
        );
        let mut next = planned.last().map_or(lines.read_from(), |c| c.end);
        let mut reads = futures::stream::iter(planned)
            .map(|c| async move { storage.get_range(&r.path, c.clone()).await.map(|b| (c, b)) })
            .buffered(2);
        while let Some(read) = reads.next().await {
            let (c, bytes) = read?;
            self.bytes_read.add(c.end - c.start);
            let n = lines.push(&bytes, c.end == r.size);
            self.decode(&mut decoded, &mut lines, n, storage, r, name)
                .await?;
            if lines.is_done() {
                break;
            }
        }
        // A last line longer than what was planned: read on, in steps
        // that double, to its end.
        let mut step = TAIL_STEP;
        while !lines.is_done() {
            let c = next..r.size.min(next.saturating_add(step));
            let bytes = storage.get_range(&r.path, c.clone()).await?;
            self.bytes_read.add(c.end - c.start);
            let n = lines.push(&bytes, c.end == r.size);
            self.decode(&mut decoded, &mut lines, n, storage, r, name)
                .await?;
            (next, step) = (c.end, step.saturating_mul(2));
        }
        self.bad_records.add(decoded.bad);
        Ok(futures::stream::iter(decoded.batches.into_iter().map(Ok)).boxed())
    }

    /// Decodes the first `n` bytes of `lines`' body into `into`, then
    /// drops them; a bad line is an error naming its line in the file.
    async fn decode(
        &self,
        into: &mut Bodies,
        lines: &mut RangeLines,
        n: usize,
        storage: &Storage,
        r: &FileRange,
        name: &str,
    ) -> Result<(), ExecutorError> {
        if n == 0 {
            return Ok(());
        }
        let at = lines.body_offset();
        match into.decode(&self.lines, &lines.body()[..n]) {
            Ok(()) => {
                lines.consume(n);
                Ok(())
            }
            Err(bad) => {
                // The line number within the file: count the lines before
                // the body (only on this error path).
                let before = if at == 0 {
                    0
                } else {
                    let prefix = storage.get_range(&r.path, 0..at).await?;
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

/// The byte ranges `[from, to)` is read in.
fn chunks(from: u64, to: u64) -> Vec<std::ops::Range<u64>> {
    (from..to)
        .step_by(CHUNK as usize)
        .map(|s| s..to.min(s + CHUNK))
        .collect()
}

/// A range's batches, decoded a body of whole lines at a time.
#[derive(Default)]
struct Bodies {
    batches: Vec<RecordBatch>,
    /// Whether the next body starts with a csv header to skip.
    header: bool,
    bad: u64,
    decoder: Option<lines::LineDecoder>,
}

impl Bodies {
    /// Decodes every line of `body`; a bad line's index is counted from
    /// the body's first line.
    fn decode(&mut self, fmt: &LineFormat, body: &[u8]) -> Result<(), lines::BadLine> {
        let mut d = Decoded::new(fmt, body).reusing(self.decoder.take());
        if std::mem::take(&mut self.header) {
            d = d.skip_header();
        }
        while let Some(b) = d.next_batch() {
            self.batches.push(b?);
        }
        self.bad += d.bad;
        self.decoder = d.into_decoder();
        Ok(())
    }
}
