//! A Delta Lake table on the driver: its place, partition columns and
//! write mode checked at submit, and the query's output against the
//! table's schema when the table exists; each batch's data files checked
//! and added to the table in one commit, before `commits/N`. The log's
//! format is `sluice_common::sink::delta`'s; the table is created by the
//! query's first commit, with the output's schema.
//!
//! Invariant (docs/design-notes.md, "Exactly-once into a Delta table"): a
//! batch is in the table at most once. Its commit carries the query's id
//! and the batch as a `txn` action; a batch at or below the query's
//! newest `txn` version is in the table already and is not committed
//! again (a replay, or a deposed driver), and a commit is written only at
//! a version no commit holds (a create-only put).

mod compact;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::QueryCheckpoint;
use sluice_common::sink::delta::{AddFile, Commit, NewTable, schema_string};
use sluice_common::sink::delta_log::{self, Standing};
use sluice_common::sink::delta_table::{
    file_schema, partition_values, partitions_by, schema_difference,
};
use sluice_common::sink::{FileSink, SinkFile};
use sluice_common::spec::{DeltaSinkSpec, OutputMode, QuerySpec};
use sluice_common::storage::Storage;
use sluice_common::time::now_ms;
use sluice_proto as pb;
use tokio::sync::Mutex;
use tracing::{debug, info};

use super::compactions::Compactions;
use super::files::{
    check_partition_by, check_place, check_rows_in_files, cleanup, files_written, probe,
};
use super::{Committed, Committer, Ended, Prepared, SinkIo, SinkKind, Written};
use crate::config::DriverConfig;
use crate::error::DriverError;
use crate::failpoint::Point;

/// How many times a commit tries a newer version after another writer
/// took the one it tried, before the batch fails (and is retried).
const MAX_RACES: u32 = 64;

/// The Delta sink of a query's spec.
pub(super) struct Kind<'s>(pub &'s DeltaSinkSpec);

impl SinkKind for Kind<'_> {
    fn describe(&self) -> &'static str {
        "is a Delta table"
    }

    /// The tasks write Parquet part files, and report them as the file
    /// sink's tasks do.
    fn written(&self, report: &pb::task_output::Sink, into: &mut Written) -> bool {
        files_written(report, into)
    }

    fn check_spec(
        &self,
        _spec: &QuerySpec,
        others: &[(String, QuerySpec)],
        checkpoint_root: &str,
    ) -> Result<(), DriverError> {
        check_place("sink.delta.path", &self.0.path, others, checkpoint_root)
    }

    fn probe<'a>(
        &'a self,
        config: &'a DriverConfig,
        _deadline: Duration,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(probe(&config.stores, &self.0.path, "sink.delta.path"))
    }

    /// Rows are appended, so the query emits each row once; every column
    /// has a Delta type; partition columns hold values that name
    /// directories exactly.
    fn check_output(&self, output: &SchemaRef, mode: OutputMode) -> Result<(), DriverError> {
        if mode != OutputMode::Append {
            return Err(DriverError::Invalid(format!(
                "output_mode: {} (the default of a query that keeps state) changes rows it \
                 emitted before, and a Delta table is appended to; set output_mode: append",
                mode.as_str()
            )));
        }
        file_schema(output).map_err(|e| DriverError::Invalid(format!("sink.delta: {e}")))?;
        check_partition_by("sink.delta.partition_by", &self.0.partition_by, output)?;
        for (i, c) in self.0.partition_by.iter().enumerate() {
            let t = output
                .field_with_name(c)
                .expect("checked above")
                .data_type();
            if !partitions_by(t) {
                return Err(DriverError::Invalid(format!(
                    "sink.delta.partition_by[{i}]: column {c:?} is {t}; a Delta table is \
                     partitioned by text, integer, date or boolean columns"
                )));
            }
        }
        Ok(())
    }

    /// A table that exists already has the query's partition columns and
    /// its output's columns: a query never changes a table's schema.
    fn check_table<'a>(
        &'a self,
        config: &'a DriverConfig,
        output: &'a SchemaRef,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async move {
            let storage = config.stores.open(&self.0.path)?;
            let Some((meta, protocol)) = delta_log::table_meta(&storage).await? else {
                return Ok(());
            };
            let path = &self.0.path;
            if let Some(why) = protocol.refusal() {
                return Err(DriverError::Invalid(format!(
                    "sink.delta: the table at {path} {why}"
                )));
            }
            if meta.schema_string.contains("delta.invariants") {
                return Err(DriverError::Invalid(format!(
                    "sink.delta: the table at {path} has column invariants, which Sluice does \
                     not check"
                )));
            }
            if meta.partition_columns != self.0.partition_by {
                return Err(DriverError::Invalid(format!(
                    "sink.delta.partition_by: the table at {path} is partitioned by {:?}, not {:?}",
                    meta.partition_columns, self.0.partition_by
                )));
            }
            let ours = schema_string(output)?;
            let differences = schema_difference(&meta.schema_string, &ours)?;
            if !differences.is_empty() {
                return Err(DriverError::Invalid(format!(
                    "sink.delta: the query's output does not match the table at {path}: {}",
                    differences.join("; ")
                )));
            }
            Ok(())
        })
    }

    /// The rows a task says it wrote are the rows of its data files.
    fn check_report(&self, batch: u64, task: usize, o: &pb::TaskOutput) -> Result<(), DriverError> {
        check_rows_in_files(batch, task, o)
    }

    fn open<'a>(
        &'a self,
        io: &'a SinkIo,
    ) -> BoxFuture<'a, Result<Box<dyn Committer>, DriverError>> {
        Box::pin(async move {
            let stores = io.config().stores.clone();
            let path = &self.0.path;
            let files = io
                .storage("open Delta table", || async {
                    FileSink::open(&stores, path)
                })
                .await?;
            let table = NewTable {
                id: uuid::Uuid::new_v4().to_string(),
                schema_string: schema_string(io.output())?,
                partition_columns: self.0.partition_by.clone(),
            };
            let committer = Delta {
                path: path.clone(),
                files,
                io: io.clone(),
                table,
                standing: Mutex::new(None),
                cleaner: std::sync::Mutex::new(cleanup::Cleaner::default()),
                compactions: Compactions::new(self.0.compact.as_ref().map(|c| c.every_batches())),
                target_file_bytes: self.0.target_file_bytes(),
            };
            Ok(Box::new(committer) as Box<dyn Committer>)
        })
    }

    /// The batch the stop left uncommitted is in the table if the query's
    /// newest `txn` version has reached it.
    fn reopen<'a>(
        &'a self,
        config: &'a DriverConfig,
        qc: &'a QueryCheckpoint,
        batch: u64,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(async move {
            let Some(meta) = qc.metadata().await? else {
                return Ok(false);
            };
            let storage = config.stores.open(&self.0.path)?;
            let at = delta_log::standing(&storage, &meta.id.to_string()).await?;
            Ok(at.batch.is_some_and(|b| b >= batch))
        })
    }

    /// Nothing of the query runs any more: its temporary files go. Data
    /// files of batches never committed are in no commit, so no reader
    /// sees them.
    fn ended<'a>(&'a self, end: &'a Ended<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Ok(files) = FileSink::open(&end.config.stores, &self.0.path) {
                cleanup::purge(files, None).await;
            }
        })
    }
}

/// A running query's Delta table.
struct Delta {
    path: String,
    files: FileSink,
    io: SinkIo,
    /// What the query's first commit says of the table, if the table
    /// does not exist yet.
    table: NewTable,
    /// Where the query stands in the log, as its last commit left it;
    /// `None`: to be read from the log.
    standing: Mutex<Option<Standing>>,
    cleaner: std::sync::Mutex<cleanup::Cleaner>,
    target_file_bytes: u64,
    /// Its compactions (`sink.delta.compact`).
    compactions: Compactions,
}

impl Delta {
    fn storage(&self) -> &Storage {
        self.files.storage()
    }

    /// The batch's data files as `add` actions, each with its partition
    /// values read from its path.
    fn adds(&self, files: &[SinkFile]) -> Result<Vec<AddFile>, DriverError> {
        let now = now_ms();
        files
            .iter()
            .map(|f| {
                Ok(AddFile {
                    partition_values: partition_values(&f.path, &self.table.partition_columns)
                        .map_err(|e| DriverError::TaskFailed(e.to_string()))?,
                    path: f.path.clone(),
                    size: f.bytes,
                    modification_time_ms: now,
                    num_records: f.rows,
                })
            })
            .collect()
    }

    /// Where the query stands: as its last commit left it, or read.
    async fn standing(&self, cached: &mut Option<Standing>) -> Result<Standing, DriverError> {
        if let Some(s) = *cached {
            return Ok(s);
        }
        let (storage, app) = (self.storage(), self.io.query_id());
        let read = self
            .io
            .storage("read the Delta log", || delta_log::standing(storage, app))
            .await?;
        *cached = Some(read);
        Ok(read)
    }
}

impl Committer for Delta {
    /// Adds the batch's data files to the table in one commit at the
    /// log's next version, unless the batch is in the table already.
    fn commit<'a>(
        &'a self,
        batch: u64,
        written: &'a Written,
        _prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        Box::pin(async move {
            let (io, files) = (&self.io, &self.files);
            io.storage("check Delta data files", || {
                files.check_files(&written.files)
            })
            .await?;
            let adds = self.adds(&written.files)?;
            io.hold(Point::DeltaPrepared, batch).await?;
            let mut cached = self.standing.lock().await;
            for _ in 0..MAX_RACES {
                let at = self.standing(&mut cached).await?;
                if at.batch.is_some_and(|b| b >= batch) {
                    debug!(batch, in_table = ?at.batch, "the batch is in the Delta table already");
                    return Ok(Committed::default());
                }
                let version = at.latest.map_or(0, |v| v + 1);
                let commit = Commit {
                    created: at.latest.is_none().then_some(&self.table),
                    files: &adds,
                    app_id: io.query_id(),
                    batch,
                    now_ms: now_ms(),
                };
                let bytes = commit.encode();
                let made = io
                    .storage("commit to the Delta log", || {
                        delta_log::commit(self.storage(), version, bytes.clone())
                    })
                    .await?;
                match made {
                    delta_log::Committed::Made => {
                        *cached = Some(Standing {
                            latest: Some(version),
                            batch: Some(batch),
                        });
                        if version == 0 {
                            info!(path = %self.path, "Delta table created");
                        }
                        drop(cached);
                        self.io.hold(Point::DeltaCommitted, batch).await?;
                        return Ok(Committed::default());
                    }
                    // Another writer took the version: read the log again.
                    delta_log::Committed::Taken(_) => *cached = None,
                }
            }
            Err(DriverError::Busy(format!(
                "batch {batch}: other writers took {MAX_RACES} versions of the Delta log in a row"
            )))
        })
    }

    /// Removes the temporary files of failed attempts when due, and
    /// compacts the table when due (see [`compact`]).
    fn after_commit(&self, committed: u64) {
        if let Some(turn) = self.compactions.due(committed) {
            let (storage, app) = (self.storage().clone(), self.io.query_id().to_string());
            let target = self.target_file_bytes;
            self.io.spawn(async move {
                let _turn = turn;
                if let Err(e) = compact::compact(&storage, &app, target, committed).await {
                    tracing::warn!(error = %e, committed, "compacting the Delta table failed; it will try again");
                }
            });
        }
        cleanup::after_commit(&self.cleaner, &self.io, &self.files, committed);
    }
}
