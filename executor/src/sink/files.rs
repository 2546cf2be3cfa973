//! The file sink on the executor: a task's output rows as part files laid
//! out by [`Parts`] (on the blocking side), and the pieces written
//! create-only into the sink's directory (on the task), reported as the
//! files it made.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::sink::FileSink;
use sluice_common::storage::VisibleWriter;
use sluice_proto::{FilesTaskSink, FilesWritten, SinkFile, task_output};
use tokio::sync::mpsc;

use super::parts::{Layout, Parts, Piece};
use super::{Encode, SinkWriter, TaskOut, Written, encoder};
use crate::cache::Caches;
use crate::error::ExecutorError;

/// The file sink a task writes, and the tag in its files' names.
pub struct FilesWriter(FilesTaskSink, String);

impl FilesWriter {
    /// The writer of `sink`; a sink without a path is refused.
    pub fn new(sink: &FilesTaskSink) -> Result<Self, String> {
        Self::tagged(sink, "")
    }

    /// The writer of `sink` whose files' names carry `tag` (see
    /// [`Layout::tag`]).
    pub fn tagged(sink: &FilesTaskSink, tag: &str) -> Result<Self, String> {
        if sink.path.is_empty() {
            return Err("missing sink path".into());
        }
        Ok(FilesWriter(sink.clone(), tag.to_string()))
    }

    pub(super) fn layout(&self, task: TaskOut) -> Layout {
        Layout {
            format: self.0.format(),
            partition_by: self.0.partition_by.clone(),
            max_file_bytes: self.0.max_file_bytes.max(1),
            batch: task.batch,
            partition: task.partition,
            tag: self.1.clone(),
        }
    }
}

impl SinkWriter for FilesWriter {
    fn check(&self, schema: &SchemaRef) -> Result<(), ExecutorError> {
        encoder(self.0.format(), schema.clone()).map(|_| ())
    }

    fn encoder(&self, task: TaskOut, schema: &SchemaRef) -> Result<Box<dyn Encode>, ExecutorError> {
        Ok(Box::new(Parts::new(self.layout(task), schema)?))
    }

    fn write<'a>(
        &'a self,
        caches: &'a Arc<Caches>,
        _: u32,
        rx: mpsc::Receiver<Piece>,
    ) -> BoxFuture<'a, Result<Written, ExecutorError>> {
        Box::pin(async move {
            let (caches, path) = (caches.clone(), self.0.path.clone());
            let sink = tokio::task::spawn_blocking(move || caches.sink(&path))
                .await
                .map_err(|e| ExecutorError::TaskPanicked(e.to_string()))??;
            write_files(&sink, rx).await
        })
    }
}

impl Encode for Parts {
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<Piece>) -> Result<u64, ExecutorError> {
        let from = out.len();
        Parts::write(self, batch, out)?;
        Ok(out[from..]
            .iter()
            .map(|p| match p {
                Piece::Data { bytes, .. } => bytes.len() as u64,
                _ => 0,
            })
            .sum())
    }

    fn finish(self: Box<Self>, out: &mut Vec<Piece>) -> Result<(), ExecutorError> {
        Parts::finish(*self, out)
    }
}

/// Writes the pieces into part files, create-only.
async fn write_files(
    sink: &FileSink,
    mut rx: mpsc::Receiver<Piece>,
) -> Result<Written, ExecutorError> {
    let mut writers: HashMap<Arc<str>, VisibleWriter> = HashMap::new();
    let mut files = Vec::new();
    while let Some(piece) = rx.recv().await {
        match piece {
            Piece::Data { name, bytes } => {
                if !writers.contains_key(&name) {
                    let w = sink.begin_part(&name).await?;
                    writers.insert(name.clone(), w);
                }
                writers
                    .get_mut(&name)
                    .expect("begun above")
                    .write(bytes)
                    .await?;
            }
            Piece::End { name, rows } => {
                let w = writers.remove(&name).ok_or_else(|| {
                    ExecutorError::TaskPanicked(format!("{name} ended before any bytes"))
                })?;
                let f = sink.finish_part(w, &name, rows).await?;
                files.push(SinkFile {
                    path: f.path,
                    rows: f.rows,
                    bytes: f.bytes,
                });
            }
            other => {
                return Err(ExecutorError::TaskPanicked(format!(
                    "{other:?} made for the file sink"
                )));
            }
        }
    }
    match writers.into_keys().next() {
        Some(name) => Ok(Written::Unfinished(name)),
        None if files.is_empty() => Ok(Written::Done(None)),
        None => Ok(Written::Done(Some(task_output::Sink::Files(
            FilesWritten { files },
        )))),
    }
}

/// The files a task's report lists (none when it wrote none).
#[cfg(test)]
pub fn files_of(out: &sluice_proto::TaskOutput) -> &[SinkFile] {
    match &out.sink {
        Some(task_output::Sink::Files(f)) => &f.files,
        _ => &[],
    }
}
