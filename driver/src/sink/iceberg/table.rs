//! An Iceberg table as the driver reads and writes it: its current
//! metadata through the catalog, files through storage, and one batch's
//! append: manifest, manifest list, metadata file, then the catalog's
//! compare-and-swap.

use bytes::Bytes;
use sluice_common::sink::iceberg::manifest::{
    DataFile, NewManifest, encode_manifest, encode_manifest_list, read_manifest_list,
};
use sluice_common::sink::iceberg::metadata::{
    Snapshot, TableMetadata, next_metadata_name, summary,
};
use sluice_common::storage::{Path, Storage, Stores};
use sluice_common::time::now_ms;

use super::catalog::SqlTable;
use crate::error::DriverError;

/// A table's metadata and the file it was read from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub file: String,
    pub meta: TableMetadata,
}

/// Reads the file at the full location `uri` (a local path or a URL).
async fn read_at(stores: &Stores, uri: &str) -> Result<Bytes, DriverError> {
    let (dir, name) = uri
        .rsplit_once('/')
        .ok_or_else(|| DriverError::Invalid(format!("{uri:?} is no file location")))?;
    let storage = stores.open(dir)?;
    let path = Path::from(name);
    storage.get(&path).await?.ok_or_else(|| {
        DriverError::Common(sluice_common::Error::Corrupt {
            path: uri.to_string(),
            reason: "the catalog names this metadata file, which does not exist".into(),
        })
    })
}

/// The table as its catalog names it now; `None` if it has no table.
pub async fn load(stores: &Stores, catalog: &SqlTable) -> Result<Option<Loaded>, DriverError> {
    let Some(file) = catalog.current().await? else {
        return Ok(None);
    };
    let bytes = read_at(stores, &file).await?;
    let meta = TableMetadata::parse(&file, &bytes)?;
    Ok(Some(Loaded { file, meta }))
}

/// Creates the table `meta` describes in `catalog`, or loads the one
/// another writer created first.
pub async fn create(
    stores: &Stores,
    catalog: &SqlTable,
    meta: TableMetadata,
) -> Result<Loaded, DriverError> {
    let storage = stores.open(&meta.location)?;
    let name = next_metadata_name(None);
    storage
        .create(&Path::from(name.as_str()), Bytes::from(meta.encode()))
        .await?;
    let file = format!("{}/{name}", meta.location);
    if catalog.create(file.clone()).await? {
        tracing::info!(table = %catalog.describe(), location = %meta.location, "Iceberg table created");
        return Ok(Loaded { file, meta });
    }
    load(stores, catalog).await?.ok_or_else(|| {
        DriverError::Internal(format!("{}: created and gone at once", catalog.describe()))
    })
}

/// One batch's append, prepared once and committed on top of whatever
/// the table's current snapshot is.
pub struct Append {
    pub snapshot_id: i64,
    pub manifest: NewManifest,
    pub files: Vec<DataFile>,
    pub query_id: String,
    pub batch: u64,
}

impl Append {
    /// Writes the batch's manifest into `storage` (the table's location).
    pub async fn prepare(
        storage: &Storage,
        table: &Loaded,
        (query_id, batch): (&str, u64),
        files: Vec<DataFile>,
    ) -> Result<Self, DriverError> {
        // A random positive id, as Iceberg's writers pick them.
        let snapshot_id = (rand::random::<u64>() >> 1) as i64;
        let bytes = encode_manifest(&table.meta, snapshot_id, &files)?;
        let name = format!("metadata/{}-m0.avro", uuid::Uuid::new_v4());
        let length = bytes.len() as u64;
        storage
            .create(&Path::from(name.as_str()), Bytes::from(bytes))
            .await?;
        let manifest = NewManifest {
            path: format!("{}/{name}", table.meta.location),
            length,
            snapshot_id,
            files: files.len() as u64,
            records: files.iter().map(|f| f.records).sum(),
        };
        Ok(Append {
            snapshot_id,
            manifest,
            files,
            query_id: query_id.to_string(),
            batch,
        })
    }

    /// The table after this append on top of `table`: its manifest list
    /// and metadata file written, not yet named by the catalog.
    pub async fn on(
        &self,
        stores: &Stores,
        storage: &Storage,
        table: &Loaded,
    ) -> Result<Loaded, DriverError> {
        let parent = table.meta.current();
        let entries = match parent {
            Some(p) => {
                read_manifest_list(&p.manifest_list, &read_at(stores, &p.manifest_list).await?)?
            }
            None => Vec::new(),
        };
        let sequence = table.meta.last_sequence_number + 1;
        let parent_id = parent.map(|p| p.snapshot_id);
        let list = encode_manifest_list(
            (self.snapshot_id, parent_id, sequence),
            entries,
            &self.manifest,
        )?;
        let list_name = format!(
            "metadata/snap-{}-{}.avro",
            self.snapshot_id,
            uuid::Uuid::new_v4()
        );
        storage
            .create(&Path::from(list_name.as_str()), Bytes::from(list))
            .await?;
        let bytes: u64 = self.files.iter().map(|f| f.bytes).sum();
        let snapshot = Snapshot {
            snapshot_id: self.snapshot_id,
            parent_snapshot_id: parent_id,
            sequence_number: sequence,
            timestamp_ms: now_ms().max(table.meta.last_updated_ms),
            manifest_list: format!("{}/{list_name}", table.meta.location),
            summary: summary(
                (&self.query_id, self.batch),
                (self.files.len() as u64, self.manifest.records, bytes),
                parent,
            ),
            schema_id: Some(table.meta.current_schema_id),
            rest: Default::default(),
        };
        let meta = table.meta.append(snapshot, &table.file);
        let name = next_metadata_name(Some(&table.file));
        storage
            .create(&Path::from(name.as_str()), Bytes::from(meta.encode()))
            .await?;
        Ok(Loaded {
            file: format!("{}/{name}", meta.location),
            meta,
        })
    }
}
