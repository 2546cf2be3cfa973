//! Line-oriented files (jsonl, csv): where a byte range's lines are, and
//! decoding them into record batches. Pure: bytes in, batches out.
//!
//! ```text
//!  file:  ...\n[line starting before start]\n|start  L1\n L2\n ... Lk ...|end ...\n
//!  range: the lines whose first byte lies in [start, end): L1..Lk, where Lk
//!         may run past `end` to its newline (or to the end of the file)
//! ```
//!
//! Each line is a record. Lines are decoded a group at a time; when a group
//! fails, its lines are decoded one by one to find the bad ones, which are
//! skipped and counted, or reported by their line number in the range.

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use sluice_common::spec::{CsvOptions, Format};

/// Lines decoded together (and the most rows in one batch).
pub const GROUP_LINES: usize = 8192;

/// A range's whole lines, found in the file's bytes as they arrive in
/// chunks, from `read_from()` on. Each `push` gives how many bytes at the
/// front of `body()` are whole lines of the range, ready to decode; the
/// caller then `consume`s them. Only a line cut by a chunk's end is kept
/// between pushes.
#[derive(Debug)]
pub struct RangeLines {
    end: u64,
    /// The bytes not given out yet, from the file's offset `at`.
    buf: Vec<u8>,
    at: u64,
    /// Whether `at` is at the start of a line of the range.
    in_range: bool,
    done: bool,
}

impl RangeLines {
    pub fn new(start: u64, end: u64) -> Self {
        assert!(start < end, "an empty range {start}..{end}");
        RangeLines {
            end,
            buf: Vec::new(),
            at: start.saturating_sub(1),
            in_range: start == 0,
            done: false,
        }
    }

    /// Where in the file the first chunk starts: the byte before the
    /// range, which tells whether a line starts at `start`.
    pub fn read_from(&self) -> u64 {
        self.at
    }

    /// Whether the range's last line has been given out.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Appends the file's next bytes (`eof`: they are its last) and
    /// returns how many bytes at the front of `body()` are whole lines of
    /// the range.
    pub fn push(&mut self, chunk: &[u8], eof: bool) -> usize {
        assert!(!self.done, "bytes pushed after the range's last line");
        self.buf.extend_from_slice(chunk);
        if !self.in_range && !self.find_first(eof) {
            return 0;
        }
        // Every line given out so far ended before `end - 1`, so `at` is
        // at most `end - 1`: the newline ending the range is in `buf` or
        // after it.
        let last = usize::try_from(self.end - 1 - self.at).expect("range within buffer");
        if let Some(i) = self.buf.get(last..).and_then(memchr) {
            self.done = true;
            return last + i + 1;
        }
        if eof {
            self.done = true;
            return self.buf.len();
        }
        memchr::memrchr(b'\n', &self.buf).map_or(0, |i| i + 1)
    }

    /// Drops the bytes before the range's first line, once a newline
    /// shows where it starts; `false` while it is not known yet, or when
    /// the range holds no line start.
    fn find_first(&mut self, eof: bool) -> bool {
        let Some(i) = memchr(&self.buf) else {
            self.at += self.buf.len() as u64;
            self.buf.clear();
            self.done = eof;
            return false;
        };
        self.consume(i + 1);
        if self.at >= self.end {
            // The first line of this range starts in the next one.
            self.buf.clear();
            self.done = true;
            return false;
        }
        self.in_range = true;
        true
    }

    /// The bytes not given out yet.
    pub fn body(&self) -> &[u8] {
        &self.buf
    }

    /// Where `body()` starts in the file.
    pub fn body_offset(&self) -> u64 {
        self.at
    }

    /// Drops the first `n` bytes of `body()`, once decoded.
    pub fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        self.at += n as u64;
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf)
}

/// Where the lines of `body` lie in it, each with its newline (the last
/// may have none).
fn split_lines(body: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut lines = Vec::with_capacity(body.len() / 64);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', body) {
        lines.push(start..end + 1);
        start = end + 1;
    }
    if start < body.len() {
        lines.push(start..body.len());
    }
    lines
}

/// A record that does not parse: its line, counted from 0 at the range's
/// first line, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub index: u64,
    pub reason: String,
}

/// How to decode one range's lines.
#[derive(Debug, Clone)]
pub struct LineFormat {
    pub format: Format,
    /// Every column of a record.
    pub schema: SchemaRef,
    /// The columns decoded (indexes into `schema`, ascending); `None`:
    /// every one. A value of a column not decoded is not checked: a
    /// record is bad only for what the query reads of it.
    pub columns: Option<Vec<usize>>,
    pub csv: CsvOptions,
    pub skip_bad: bool,
}

impl LineFormat {
    /// The schema of the decoded batches.
    pub fn output_schema(&self) -> SchemaRef {
        match &self.columns {
            None => self.schema.clone(),
            Some(c) => std::sync::Arc::new(self.schema.project(c).expect("columns of the schema")),
        }
    }
}

/// The decoded batches of `body` (whole lines), group by group, with the
/// bad lines skipped (and added to `bad`) or reported as the error.
pub struct Decoded<'a> {
    fmt: &'a LineFormat,
    body: &'a [u8],
    /// Where each line lies in `body`.
    lines: Vec<std::ops::Range<usize>>,
    next: usize,
    pub bad: u64,
    /// The decoder of whole groups, kept from one to the next (and from
    /// one body to the next, see [`Decoded::reusing`]) with its buffers.
    decoder: Option<LineDecoder>,
}

impl<'a> Decoded<'a> {
    pub fn new(fmt: &'a LineFormat, body: &'a [u8]) -> Self {
        Decoded {
            fmt,
            body,
            lines: split_lines(body),
            next: 0,
            bad: 0,
            decoder: None,
        }
    }

    /// Decodes with `decoder`, from an earlier body of the same format.
    pub fn reusing(mut self, decoder: Option<LineDecoder>) -> Self {
        self.decoder = decoder;
        self
    }

    /// The decoder, for the next body.
    pub fn into_decoder(self) -> Option<LineDecoder> {
        self.decoder
    }

    /// Skips the first line (a csv header).
    pub fn skip_header(mut self) -> Self {
        self.next = self.next.max(1).min(self.lines.len());
        self
    }

    /// The next batch; `None` at the end.
    pub fn next_batch(&mut self) -> Option<Result<RecordBatch, BadLine>> {
        while self.next < self.lines.len() {
            let from = self.next;
            let to = (from + GROUP_LINES).min(self.lines.len());
            self.next = to;
            let group: Vec<usize> = (from..to).filter(|&i| !is_blank(self.line(i))).collect();
            if group.is_empty() {
                continue;
            }
            let decoded = match self.contiguous(&group) {
                Some(bytes) => self.decode_group(bytes, group.len()),
                None => decode(self.fmt, group.iter().map(|&i| self.line(i))),
            };
            match decoded {
                Ok(b) => return Some(Ok(b)),
                Err(_) => match self.slow(&group) {
                    Ok(Some(b)) => return Some(Ok(b)),
                    Ok(None) => continue,
                    Err(e) => return Some(Err(e)),
                },
            }
        }
        None
    }

    /// Decodes `count` whole lines with the kept decoder. A decoder that
    /// failed is dropped: its state is not known.
    fn decode_group(&mut self, bytes: &[u8], count: usize) -> Result<RecordBatch, ArrowError> {
        let mut d = match self.decoder.take() {
            Some(d) => d,
            None => LineDecoder::new(self.fmt, GROUP_LINES)?,
        };
        let batch = d.decode_lines(self.fmt, bytes, count)?;
        self.decoder = Some(d);
        Ok(batch)
    }

    /// The bytes of `group` as they lie in the body, when its lines follow
    /// one another there (no blank line between) and the last ends with a
    /// newline: the decoder reads them in place.
    fn contiguous(&self, group: &[usize]) -> Option<&'a [u8]> {
        let (&first, &last) = (group.first()?, group.last()?);
        let whole = last - first + 1 == group.len() && self.line(last).ends_with(b"\n");
        whole.then(|| &self.body[self.lines[first].start..self.lines[last].end])
    }

    /// The `i`th line of the body, with its newline.
    fn line(&self, i: usize) -> &'a [u8] {
        &self.body[self.lines[i].clone()]
    }

    /// Decodes a failed group line by line: the bad lines are skipped and
    /// counted, or the first is the error.
    fn slow(&mut self, group: &[usize]) -> Result<Option<RecordBatch>, BadLine> {
        let mut good = Vec::with_capacity(group.len());
        for &i in group {
            let line = self.line(i);
            match decode(self.fmt, std::iter::once(line)) {
                Ok(_) => good.push(line),
                Err(_) if self.fmt.skip_bad => self.bad += 1,
                Err(e) => {
                    return Err(BadLine {
                        index: i as u64,
                        reason: e.to_string(),
                    });
                }
            }
        }
        if good.is_empty() {
            return Ok(None);
        }
        decode(self.fmt, good.into_iter())
            .map(Some)
            .map_err(|e| BadLine {
                index: group[0] as u64,
                reason: format!("lines that parse one by one do not parse together: {e}"),
            })
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace())
}

/// Decodes whole lines into one batch of the schema.
pub(crate) fn decode<'l>(
    fmt: &LineFormat,
    lines: impl Iterator<Item = &'l [u8]>,
) -> Result<RecordBatch, ArrowError> {
    let mut buf = Vec::new();
    let mut count = 0;
    for l in lines {
        buf.extend_from_slice(l);
        if !l.ends_with(b"\n") {
            buf.push(b'\n');
        }
        count += 1;
    }
    decode_bytes(fmt, &buf, count)
}

/// Decodes `count` whole lines, each ending with a newline, into one batch
/// of the schema.
fn decode_bytes(fmt: &LineFormat, buf: &[u8], count: usize) -> Result<RecordBatch, ArrowError> {
    LineDecoder::new(fmt, count)?.decode_lines(fmt, buf, count)
}

/// A decoder of jsonl or csv lines into batches of the output schema.
pub struct LineDecoder(Inner);

enum Inner {
    Jsonl(arrow_json::reader::Decoder),
    Csv(Box<arrow_csv::reader::Decoder>),
}

impl LineDecoder {
    /// A decoder of up to `lines` lines at a time.
    fn new(fmt: &LineFormat, lines: usize) -> Result<Self, ArrowError> {
        // Room for one more row than lines: a line holding two records is
        // caught by the count in `decode_lines`, not by a full decoder.
        let rows = lines + 1;
        Ok(LineDecoder(match fmt.format {
            Format::Jsonl => Inner::Jsonl(
                arrow_json::ReaderBuilder::new(fmt.output_schema())
                    .with_batch_size(rows)
                    .build_decoder()?,
            ),
            Format::Csv => {
                let mut builder = arrow_csv::ReaderBuilder::new(fmt.schema.clone());
                if let Some(c) = &fmt.columns {
                    builder = builder.with_projection(c.clone());
                }
                Inner::Csv(Box::new(
                    builder
                        .with_header(false)
                        .with_delimiter(fmt.csv.delimiter_byte())
                        .with_batch_size(rows)
                        .build_decoder(),
                ))
            }
            Format::Parquet => unreachable!("parquet is not line-oriented"),
        }))
    }

    /// Decodes `count` whole lines, each ending with a newline, into one
    /// batch; more or fewer records than lines is an error.
    fn decode_lines(
        &mut self,
        fmt: &LineFormat,
        buf: &[u8],
        count: usize,
    ) -> Result<RecordBatch, ArrowError> {
        let batch = match &mut self.0 {
            Inner::Jsonl(d) => {
                feed(buf, |b| d.decode(b))?;
                d.flush()?
            }
            Inner::Csv(d) => {
                feed(buf, |b| d.decode(b))?;
                d.flush()?
            }
        };
        let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(fmt.output_schema()));
        if batch.num_rows() != count {
            return Err(ArrowError::ParseError(format!(
                "{count} lines gave {} records",
                batch.num_rows()
            )));
        }
        Ok(batch)
    }
}

/// Feeds `buf` to a decoder until it has taken every byte.
fn feed(
    buf: &[u8],
    mut decode: impl FnMut(&[u8]) -> Result<usize, ArrowError>,
) -> Result<(), ArrowError> {
    let mut at = 0;
    while at < buf.len() {
        let n = decode(&buf[at..])?;
        if n == 0 {
            return Err(ArrowError::ParseError("the decoder took no bytes".into()));
        }
        at += n;
    }
    Ok(())
}
