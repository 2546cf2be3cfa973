//! The files of one task's output: which file each output row goes to, and
//! the bytes of each, as a stream of [`Piece`]s for the writer.
//!
//! ```text
//!  output batch ─► hive::split (partition_by) ─► per directory: the open
//!     file's encoder ─► Piece::Data ... ─► at max_file_bytes or the end:
//!     encoder.finish() ─► Piece::Data(tail), Piece::End{rows}
//! ```
//!
//! Files are named by directory, batch, partition and sequence, and cut at
//! byte counts of the encoded output, so a retried task cuts and names its
//! files the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use sluice_common::sink::part_name;
use sluice_proto::SinkFormat;

use super::{Encoder, encoder, extension, hive};
use crate::error::ExecutorError;

/// The most files one task may have open at once (one per partition
/// directory its output touches).
pub const MAX_OPEN_FILES: usize = 1024;

/// Rows encoded at a time: a file is cut between such slices, so the size
/// limit holds to within one slice.
pub const SLICE_ROWS: usize = 1024;

/// What the writer does next.
#[derive(Debug)]
pub enum Piece {
    /// More bytes of the file `name`.
    Data { name: Arc<str>, bytes: Bytes },
    /// The file `name` is complete, with `rows` rows.
    End { name: Arc<str>, rows: u64 },
    /// More records for the Kafka sink.
    Records(Vec<OutRecord>),
    /// The task's last record for the Kafka sink was sent.
    RecordsEnd,
}

/// One record for the Kafka sink.
#[derive(Debug, Clone)]
pub struct OutRecord {
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
}

/// How a task's output files are laid out.
#[derive(Debug, Clone)]
pub struct Layout {
    pub format: SinkFormat,
    pub partition_by: Vec<String>,
    pub max_file_bytes: u64,
    pub batch: u64,
    pub partition: u32,
    /// Part of each file's name before its extension (empty: none), so
    /// that writers sharing a directory never name two files alike.
    pub tag: String,
}

struct Open {
    name: Arc<str>,
    encoder: Box<dyn Encoder>,
    bytes: u64,
    rows: u64,
}

pub struct Parts {
    layout: Layout,
    cols: Vec<usize>,
    data: SchemaRef,
    open: BTreeMap<String, Open>,
    next_seq: BTreeMap<String, u32>,
}

impl Parts {
    /// The files of output of `schema`, laid out as `layout` says.
    pub fn new(layout: Layout, schema: &SchemaRef) -> Result<Self, ExecutorError> {
        let (cols, data) = hive::layout(schema, &layout.partition_by)?;
        // A format this executor cannot write fails here, before any row.
        encoder(layout.format, data.clone())?;
        Ok(Parts {
            layout,
            cols,
            data,
            open: BTreeMap::new(),
            next_seq: BTreeMap::new(),
        })
    }

    /// The pieces for one output batch.
    pub fn write(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<Piece>,
    ) -> Result<(), ExecutorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let groups = if self.cols.is_empty() {
            vec![(String::new(), batch.clone())]
        } else {
            hive::split(batch, &self.cols, &self.data)?
        };
        for (dir, rows) in groups {
            let mut at = 0;
            while at < rows.num_rows() {
                let n = SLICE_ROWS.min(rows.num_rows() - at);
                self.write_to(dir.clone(), &rows.slice(at, n), out)?;
                at += n;
            }
        }
        Ok(())
    }

    fn write_to(
        &mut self,
        dir: String,
        rows: &RecordBatch,
        out: &mut Vec<Piece>,
    ) -> Result<(), ExecutorError> {
        if !self.open.contains_key(&dir) {
            if self.open.len() >= MAX_OPEN_FILES {
                return Err(ExecutorError::BadInput(format!(
                    "sink.files.partition_by: one task's output spans more than {MAX_OPEN_FILES} partition directories"
                )));
            }
            let seq = self.next_seq.entry(dir.clone()).or_default();
            let l = &self.layout;
            let ext = match l.tag.as_str() {
                "" => extension(l.format).to_string(),
                tag => format!("{tag}.{}", extension(l.format)),
            };
            let name = part_name(&dir, l.batch, l.partition, *seq, &ext);
            *seq += 1;
            let open = Open {
                name: name.into(),
                encoder: encoder(l.format, self.data.clone())?,
                bytes: 0,
                rows: 0,
            };
            self.open.insert(dir.clone(), open);
        }
        let file = self.open.get_mut(&dir).expect("opened above");
        let bytes = file.encoder.encode(rows)?;
        file.rows += rows.num_rows() as u64;
        file.bytes += bytes.len() as u64;
        if !bytes.is_empty() {
            out.push(Piece::Data {
                name: file.name.clone(),
                bytes: Bytes::from(bytes),
            });
        }
        if file.bytes + file.encoder.buffered() >= self.layout.max_file_bytes {
            let file = self.open.remove(&dir).expect("open above");
            close(file, out)?;
        }
        Ok(())
    }

    /// The last pieces: every open file, finished.
    pub fn finish(self, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        for (_, file) in self.open {
            close(file, out)?;
        }
        Ok(())
    }
}

fn close(file: Open, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
    let tail = file.encoder.finish()?;
    if !tail.is_empty() {
        out.push(Piece::Data {
            name: file.name.clone(),
            bytes: Bytes::from(tail),
        });
    }
    out.push(Piece::End {
        name: file.name,
        rows: file.rows,
    });
    Ok(())
}
