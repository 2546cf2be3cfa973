//! An Apache Iceberg table on the driver: its catalog and warehouse
//! checked at submit, and the query's output against the table's schema
//! when the table exists; the table created, from the output's schema,
//! when the query's runner opens it; each batch's data files checked and
//! appended in one snapshot, before `commits/N`. The format is
//! `sluice_common::sink::iceberg`'s; the catalog is [`catalog`]'s.
//!
//! Invariant (docs/design-notes.md, "Exactly-once into an Iceberg
//! table"): a batch is in the table at most once. Its snapshot's summary
//! carries the query's id and the batch; a batch at or below the newest
//! batch of the query in the current snapshot's ancestry is in the table
//! already and is not appended again (a replay, or a deposed driver), and
//! the catalog moves the table only from the metadata file the append was
//! built on (a compare-and-swap).

mod compact;
mod table;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::QueryCheckpoint;
use sluice_common::sink::iceberg::manifest::DataFile;
use sluice_common::sink::iceberg::metadata::{TableMetadata, standing};
use sluice_common::sink::iceberg::schema::{columns_of, schema_difference};
use sluice_common::sink::{FileSink, SinkFile};
use sluice_common::spec::{IcebergSinkSpec, OutputMode};
use sluice_common::storage::Storage;
use sluice_common::time::now_ms;
use sluice_proto as pb;
use tokio::sync::Mutex;
use tracing::debug;

use super::compactions::Compactions;
use super::files::{check_rows_in_files, cleanup, files_written, probe};
use super::{Committed, Committer, Ended, Prepared, SinkIo, SinkKind, Written};
use crate::config::DriverConfig;
use crate::error::DriverError;
use crate::failpoint::Point;
use sluice_common::sink::iceberg::catalog::SqlTable;
use table::{Append, Loaded};

/// How many times a commit builds its snapshot again on a newer one after
/// another writer moved the table, before the batch fails (and is retried).
const MAX_RACES: u32 = 64;

/// The Iceberg sink of a query's spec.
pub(super) struct Kind<'s>(pub &'s IcebergSinkSpec);

impl Kind<'_> {
    fn catalog(&self) -> Result<SqlTable, DriverError> {
        let sql = self.0.sql();
        let file = sql
            .sqlite_path()
            .map_err(|r| DriverError::Invalid(format!("sink.iceberg.catalog.sql.uri: {r}")))?;
        Ok(SqlTable {
            file: file.into(),
            catalog: sql.name().to_string(),
            namespace: self.0.namespace.clone(),
            table: self.0.table.clone(),
        })
    }
}

/// A table Sluice can append to: format version 2 (checked as it is
/// read), unpartitioned, with the output's columns.
fn check_fits(loaded: &Loaded, output: &SchemaRef) -> Result<(), DriverError> {
    let at = &loaded.meta.location;
    if !loaded.meta.unpartitioned() {
        return Err(DriverError::Invalid(format!(
            "sink.iceberg: the table at {at} is partitioned; Sluice appends to unpartitioned tables"
        )));
    }
    let differences = schema_difference(&loaded.meta.schema()?.fields, output);
    if !differences.is_empty() {
        return Err(DriverError::Invalid(format!(
            "sink.iceberg: the query's output does not match the table at {at}: {}",
            differences.join("; ")
        )));
    }
    Ok(())
}

impl SinkKind for Kind<'_> {
    fn describe(&self) -> &'static str {
        "is an Iceberg table"
    }

    /// The tasks write Parquet part files, and report them as the file
    /// sink's tasks do.
    fn written(&self, report: &pb::task_output::Sink, into: &mut Written) -> bool {
        files_written(report, into)
    }

    fn probe<'a>(
        &'a self,
        config: &'a DriverConfig,
        _deadline: Duration,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(probe(
            &config.stores,
            &self.0.warehouse,
            "sink.iceberg.warehouse",
        ))
    }

    /// Rows are appended, so the query emits each row once; every column
    /// has an Iceberg type.
    fn check_output(&self, output: &SchemaRef, mode: OutputMode) -> Result<(), DriverError> {
        if mode != OutputMode::Append {
            return Err(DriverError::Invalid(format!(
                "output_mode: {} (the default of a query that keeps state) changes rows it \
                 emitted before, and an Iceberg table is appended to; set output_mode: append",
                mode.as_str()
            )));
        }
        columns_of(output).map_err(|e| DriverError::Invalid(format!("sink.iceberg: {e}")))?;
        Ok(())
    }

    /// A table that exists already takes the query's output: a query
    /// never changes a table's schema.
    fn check_table<'a>(
        &'a self,
        config: &'a DriverConfig,
        output: &'a SchemaRef,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async move {
            match table::load(&config.stores, &config.allowed_paths, &self.catalog()?).await? {
                Some(loaded) => check_fits(&loaded, output),
                None => Ok(()),
            }
        })
    }

    /// The rows a task says it wrote are the rows of its data files.
    fn check_report(&self, batch: u64, task: usize, o: &pb::TaskOutput) -> Result<(), DriverError> {
        check_rows_in_files(batch, task, o)
    }

    /// Loads the table, or creates it from the query's output.
    fn open<'a>(
        &'a self,
        io: &'a SinkIo,
    ) -> BoxFuture<'a, Result<Box<dyn Committer>, DriverError>> {
        Box::pin(async move {
            let stores = &io.config().stores;
            let catalog = self.catalog()?;
            let allowed = &io.config().allowed_paths;
            let loaded = match table::load(stores, allowed, &catalog).await? {
                Some(loaded) => loaded,
                None => {
                    let meta = TableMetadata::create(
                        &self.0.new_location(),
                        columns_of(io.output())?,
                        now_ms(),
                    );
                    table::create(stores, allowed, &catalog, meta).await?
                }
            };
            check_fits(&loaded, io.output())?;
            Ok(Box::new(Iceberg {
                io: io.clone(),
                catalog,
                storage: stores.open(&loaded.meta.location)?,
                data: FileSink::open(stores, &loaded.meta.data_dir())?,
                table: Mutex::new(loaded),
                target_file_bytes: self.0.target_file_bytes(),
                cleaner: std::sync::Mutex::new(cleanup::Cleaner::default()),
                compactions: Compactions::new(self.0.compact.as_ref().map(|c| c.every_batches())),
            }) as Box<dyn Committer>)
        })
    }

    /// The batch the stop left uncommitted is in the table if the query's
    /// newest batch there has reached it.
    fn reopen<'a>(
        &'a self,
        config: &'a DriverConfig,
        qc: &'a QueryCheckpoint,
        batch: u64,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(async move {
            let (Some(meta), Some(loaded)) = (
                qc.metadata().await?,
                table::load(&config.stores, &config.allowed_paths, &self.catalog()?).await?,
            ) else {
                return Ok(false);
            };
            let at = standing(&loaded.meta, &meta.id.to_string())?;
            Ok(at.is_some_and(|b| b >= batch))
        })
    }

    /// Nothing of the query runs any more: its temporary files go. A
    /// failure is logged: those files are in no manifest, so no reader
    /// sees them.
    fn ended<'a>(&'a self, end: &'a Ended<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let stores = &end.config.stores;
            let files = async {
                let allowed = &end.config.allowed_paths;
                let loaded = table::load_existing(stores, allowed, &self.catalog()?).await?;
                Ok::<_, DriverError>(FileSink::open(stores, &loaded.meta.data_dir())?)
            };
            match files.await {
                Ok(files) => cleanup::purge(files, None).await,
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot remove the ended query's temporary Iceberg files"
                ),
            }
        })
    }
}

/// A running query's Iceberg table.
struct Iceberg {
    io: SinkIo,
    catalog: SqlTable,
    /// The table's location.
    storage: Storage,
    /// Its data directory, where the tasks write.
    data: FileSink,
    /// The table as the query last saw it.
    table: Mutex<Loaded>,
    target_file_bytes: u64,
    cleaner: std::sync::Mutex<cleanup::Cleaner>,
    /// Its compactions (`sink.iceberg.compact`).
    compactions: Compactions,
}

impl Iceberg {
    /// The batch's data files, with their full paths.
    fn data_files(meta: &TableMetadata, files: &[SinkFile]) -> Vec<DataFile> {
        let dir = meta.data_dir();
        files
            .iter()
            .map(|f| DataFile {
                path: format!("{dir}/{}", f.path),
                records: f.rows,
                bytes: f.bytes,
            })
            .collect()
    }
}

impl Committer for Iceberg {
    /// The table's place and columns, for the tasks.
    fn task_sink(&self, spec: pb::TaskSink) -> pb::TaskSink {
        let Some(pb::task_sink::Kind::Iceberg(mut sink)) = spec.kind else {
            unreachable!("an Iceberg query's tasks write an Iceberg table")
        };
        let table = self
            .table
            .try_lock()
            .expect("no commit runs before the first task");
        sink.path = table.meta.data_dir();
        sink.target_file_bytes = self.target_file_bytes;
        sink.columns = table
            .meta
            .schema()
            .map(|s| s.fields.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| pb::IcebergColumn {
                id: c.id,
                name: c.name,
                required: c.required,
                r#type: c.type_name,
            })
            .collect();
        pb::TaskSink {
            kind: Some(pb::task_sink::Kind::Iceberg(sink)),
        }
    }

    /// Appends the batch's data files to the table in one snapshot on
    /// top of the current one, unless the batch is in the table already.
    /// A batch with no file appends nothing.
    fn commit<'a>(
        &'a self,
        batch: u64,
        written: &'a Written,
        _prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        Box::pin(async move {
            let (io, data) = (&self.io, &self.data);
            io.storage("check Iceberg data files", || {
                data.check_files(&written.files)
            })
            .await?;
            let mut table = self.table.lock().await;
            if written.files.is_empty() {
                return Ok(Committed::default());
            }
            let files = Self::data_files(&table.meta, &written.files);
            let query = (io.query_id(), batch);
            let append = Append::prepare(&self.storage, &table, query, files).await?;
            for race in 0..MAX_RACES {
                let at = standing(&table.meta, io.query_id())?;
                if at.is_some_and(|b| b >= batch) {
                    debug!(batch, in_table = ?at, "the batch is in the Iceberg table already");
                    return Ok(Committed::default());
                }
                let stores = &io.config().stores;
                let next = append.on(stores, &self.storage, &table).await?;
                if race == 0 {
                    io.hold(Point::IcebergPrepared, batch).await?;
                }
                if self
                    .catalog
                    .swap(table.file.clone(), next.file.clone())
                    .await?
                {
                    *table = next;
                    return Ok(Committed::default());
                }
                // Another writer moved the table: build on what it wrote.
                let config = io.config();
                *table = table::load_existing(&config.stores, &config.allowed_paths, &self.catalog)
                    .await?;
            }
            Err(DriverError::Busy(format!(
                "batch {batch}: other writers moved {} {MAX_RACES} times in a row",
                self.catalog.describe()
            )))
        })
    }

    /// Removes the temporary files of failed attempts when due, and
    /// compacts the table when due (see [`compact`]).
    fn after_commit(&self, committed: u64) {
        if let Some(turn) = self.compactions.due(committed) {
            let stores = self.io.config().stores.clone();
            let allowed = self.io.config().allowed_paths.clone();
            let (catalog, storage) = (self.catalog.clone(), self.storage.clone());
            let data = self.data.storage().clone();
            let (query, target) = (self.io.query_id().to_string(), self.target_file_bytes);
            self.io.spawn(async move {
                let _turn = turn;
                let at = compact::Place {
                    stores: &stores,
                    allowed: &allowed,
                    catalog: &catalog,
                    storage: &storage,
                    data: &data,
                };
                if let Err(e) = compact::compact(&at, &query, target, committed).await {
                    tracing::warn!(error = %e, committed, "compacting the Iceberg table failed; it will try again");
                }
            });
        }
        cleanup::after_commit(&self.cleaner, &self.io, &self.data, committed);
    }
}
