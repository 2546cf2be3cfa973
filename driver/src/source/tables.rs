//! Static tables on the driver: their schemas fixed at submit
//! (`sources/tables`), their files listed for each batch (`offsets/N`), and
//! what each task needs to load them.
//!
//! ```text
//!  submit: locate + schema per table ─► check SQL ─► sources/tables
//!  batch:  list each table's files (size, mtime) ─► offsets/N.tables ─► TaskPlan.tables
//! ```
//!
//! A replay reads the files offsets/N names; an executor that finds one
//! changed (size or modification time) fails the batch, so a replay never
//! joins with other data than the first run did.

use std::collections::BTreeMap;

use sluice_common::checkpoint::{RECORD_VERSION, Record, TableFile, TableSchema, TablesRecord};
use sluice_common::spec::{QuerySpec, TableSpec};
use sluice_common::storage::{FileMeta, Storage, Stores};
use sluice_proto as pb;

use super::infer;
use super::io::SourceIo;
use crate::error::DriverError;

/// The files of a table now.
async fn list(dir: &Storage, file: Option<&str>) -> Result<Vec<FileMeta>, sluice_common::Error> {
    match file {
        None => dir.list_inputs().await,
        Some(f) => Ok(dir.head(f).await?.into_iter().collect()),
    }
}

/// Where each table of `spec` is and its schema, checked; errors name the
/// field (`tables.cities.path`).
pub async fn resolve(
    stores: &Stores,
    spec: &QuerySpec,
) -> Result<BTreeMap<String, TableSchema>, DriverError> {
    let mut out = BTreeMap::new();
    for (name, t) in &spec.tables {
        let field = format!("tables.{name}");
        let (dir, file) = stores
            .locate_input(&t.path)
            .await
            .map_err(|r| DriverError::Invalid(format!("{field}.path: {r}")))?;
        let storage = stores.open(&dir)?;
        let files = list(&storage, file.as_deref()).await?;
        let input = infer::Input {
            field,
            path: &t.path,
            format: t.format,
            schema: &t.schema,
            csv: t.csv(),
        };
        let schema = infer::schema(&input, &storage, &files).await?;
        out.insert(
            name.clone(),
            TableSchema {
                schema: schema.as_ref().clone(),
                dir,
                file,
            },
        );
    }
    Ok(out)
}

/// Writes `sources/tables` (create-only).
pub async fn create(
    qc: &sluice_common::checkpoint::QueryCheckpoint,
    tables: BTreeMap<String, TableSchema>,
    epoch: u64,
) -> Result<(), DriverError> {
    if tables.is_empty() {
        return Ok(());
    }
    let record = TablesRecord {
        version: RECORD_VERSION,
        tables,
        epoch,
    };
    qc.create(Record::Tables, &record).await?;
    Ok(())
}

/// The query's tables record (`None` for a query without tables).
pub async fn load(io: &SourceIo, spec: &QuerySpec) -> Result<Option<TablesRecord>, DriverError> {
    if spec.tables.is_empty() {
        return Ok(None);
    }
    let record: TablesRecord = io
        .storage("read sources/tables", || {
            io.checkpoint().require(Record::Tables)
        })
        .await?;
    Ok(Some(record))
}

/// Each table's files now, for the next batch's `offsets/N`.
pub async fn files(
    io: &SourceIo,
    spec: &QuerySpec,
    record: &TablesRecord,
) -> Result<BTreeMap<String, Vec<TableFile>>, DriverError> {
    let mut out = BTreeMap::new();
    for (name, t) in &record.tables {
        let dir = io
            .storage("open a static table", || async { io.stores().open(&t.dir) })
            .await?;
        let listed = io
            .storage("list a static table", || list(&dir, t.file.as_deref()))
            .await?;
        if listed.is_empty() {
            return Err(DriverError::Invalid(format!(
                "static table {name}: no file at {}",
                spec.tables[name].path
            )));
        }
        let paths = listed.iter().map(|f| f.path.clone()).collect();
        io.check_allowed(&format!("tables.{name}.path"), &t.dir, paths)
            .await?;
        let files = listed
            .into_iter()
            .map(|f| TableFile {
                path: f.path,
                size: f.size,
                modified_ms: f.modified_ms,
            })
            .collect();
        out.insert(name.clone(), files);
    }
    Ok(out)
}

/// What each task of a batch needs to load the tables: their schemas and
/// the files `offsets/N` names.
pub fn plans(
    spec: &BTreeMap<String, TableSpec>,
    record: &TablesRecord,
    files: &BTreeMap<String, Vec<TableFile>>,
) -> Result<Vec<pb::TablePlan>, DriverError> {
    record
        .tables
        .iter()
        .map(|(name, t)| {
            let listed = files.get(name).ok_or_else(|| {
                DriverError::Internal(format!("the batch's plan lists no files for table {name}"))
            })?;
            let s = &spec[name];
            let ranges = listed
                .iter()
                .filter(|f| f.size > 0)
                .map(|f| pb::FileRange {
                    path: f.path.clone(),
                    size: f.size,
                    start: 0,
                    end: f.size,
                    modified_ms: f.modified_ms,
                })
                .collect();
            Ok(pb::TablePlan {
                name: name.clone(),
                schema: sluice_sql::encode_schema(&std::sync::Arc::new(t.schema.clone())),
                files: Some(pb::FilesTask {
                    root: t.dir.clone(),
                    format: s.format.as_str().to_string(),
                    ranges,
                    skip_bad_records: false,
                    csv: Some((&s.csv()).into()),
                    label: format!("static table {name} file"),
                }),
            })
        })
        .collect()
}
