//! An Iceberg table as the driver reads and writes it: its current
//! metadata through the catalog, files through storage, and one batch's
//! append: manifest, manifest list, metadata file, then the catalog's
//! compare-and-swap.

use std::collections::BTreeMap;

use bytes::Bytes;
use sluice_common::sink::iceberg::manifest::{
    DataFile, Entry, ListEntry, NewManifest, encode_manifest, encode_manifest_list,
    read_manifest_list,
};
use sluice_common::sink::iceberg::metadata::{
    Snapshot, TableMetadata, next_metadata_name, summary,
};
use sluice_common::storage::{AllowedPaths, Created, Path, Storage, Stores};
use sluice_common::time::now_ms;

use crate::error::DriverError;
use sluice_common::sink::iceberg::catalog::SqlTable;

/// A table's metadata and the file it was read from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub file: String,
    pub meta: TableMetadata,
}

/// Writes the new file `name` (relative to `storage`): a name that is
/// taken is a conflict, never overwritten. Every name Sluice writes into
/// a table's metadata holds a fresh uuid.
pub async fn create_new(storage: &Storage, name: &str, bytes: Vec<u8>) -> Result<(), DriverError> {
    let path = Path::from(name);
    match storage.create(&path, Bytes::from(bytes)).await? {
        Created::New => Ok(()),
        Created::Existing(_) => Err(DriverError::Common(sluice_common::Error::Conflict {
            path: storage.describe(&path),
        })),
    }
}

/// Reads the file at the full location `uri` (a local path or a URL).
pub async fn read_at(stores: &Stores, uri: &str) -> Result<Bytes, DriverError> {
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

/// The table as its catalog names it now; `None` if it has no table. Its
/// metadata file and its location, which another writer set, must lie in
/// the driver's allowed paths, as the spec's own places do.
pub async fn load(
    stores: &Stores,
    allowed: &AllowedPaths,
    catalog: &SqlTable,
) -> Result<Option<Loaded>, DriverError> {
    let Some(file) = catalog.current().await? else {
        return Ok(None);
    };
    let confined = |what: &str, at: &str| {
        let field = format!("sink.iceberg: {what} of {}", catalog.describe());
        allowed
            .check_resolved(&field, at)
            .map_err(DriverError::Invalid)
    };
    confined("the metadata file", &file)?;
    let bytes = read_at(stores, &file).await?;
    let meta = TableMetadata::parse(&file, &bytes)?;
    confined("the location", &meta.location)?;
    Ok(Some(Loaded { file, meta }))
}

/// The table as its catalog names it now, which must have it.
pub async fn load_existing(
    stores: &Stores,
    allowed: &AllowedPaths,
    catalog: &SqlTable,
) -> Result<Loaded, DriverError> {
    load(stores, allowed, catalog).await?.ok_or_else(|| {
        DriverError::FailedPrecondition(format!(
            "{}: the table was dropped while the query wrote to it",
            catalog.describe()
        ))
    })
}

/// Creates the table `meta` describes in `catalog`, or loads the one
/// another writer created first.
pub async fn create(
    stores: &Stores,
    allowed: &AllowedPaths,
    catalog: &SqlTable,
    meta: TableMetadata,
) -> Result<Loaded, DriverError> {
    let storage = stores.open(&meta.location)?;
    let name = next_metadata_name(None);
    create_new(&storage, &name, meta.encode()).await?;
    let file = format!("{}/{name}", meta.location);
    if catalog.create(file.clone()).await? {
        tracing::info!(table = %catalog.describe(), location = %meta.location, "Iceberg table created");
        return Ok(Loaded { file, meta });
    }
    load(stores, allowed, catalog).await?.ok_or_else(|| {
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
        let entries: Vec<Entry> = files
            .iter()
            .cloned()
            .map(|f| Entry::added(snapshot_id, f))
            .collect();
        let bytes = encode_manifest(&table.meta, &entries)?;
        let name = format!("metadata/{}-m0.avro", uuid::Uuid::new_v4());
        let length = bytes.len() as u64;
        create_new(storage, &name, bytes).await?;
        let path = format!("{}/{name}", table.meta.location);
        let manifest = NewManifest::of(path, length, snapshot_id, &entries);
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
        let entries = manifests_of(stores, parent).await?;
        let bytes: u64 = self.files.iter().map(|f| f.bytes).sum();
        let summary = summary(
            (&self.query_id, self.batch),
            (self.files.len() as u64, self.manifest.records, bytes),
            parent,
        );
        let next = (self.snapshot_id, entries, &self.manifest);
        write_snapshot(storage, table, next, summary).await
    }
}

/// The manifest list entries of `snapshot` (none without one).
pub async fn manifests_of(
    stores: &Stores,
    snapshot: Option<&Snapshot>,
) -> Result<Vec<ListEntry>, DriverError> {
    Ok(match snapshot {
        Some(s) => read_manifest_list(&s.manifest_list, &read_at(stores, &s.manifest_list).await?)?,
        None => Vec::new(),
    })
}

/// The table after snapshot `snapshot_id`, whose manifest list is
/// `entries` then `new`'s, with `summary`, on top of `table`'s current
/// snapshot: its manifest list and metadata file written into `storage`
/// (the table's location), not yet named by the catalog.
pub async fn write_snapshot(
    storage: &Storage,
    table: &Loaded,
    (snapshot_id, entries, new): (i64, Vec<ListEntry>, &NewManifest),
    summary: BTreeMap<String, String>,
) -> Result<Loaded, DriverError> {
    let parent_id = table.meta.current_snapshot_id;
    let sequence = table.meta.last_sequence_number + 1;
    let list = encode_manifest_list((snapshot_id, parent_id, sequence), entries, new)?;
    let list_name = format!("metadata/snap-{snapshot_id}-{}.avro", uuid::Uuid::new_v4());
    create_new(storage, &list_name, list).await?;
    let snapshot = Snapshot {
        snapshot_id,
        parent_snapshot_id: parent_id,
        sequence_number: sequence,
        timestamp_ms: now_ms().max(table.meta.last_updated_ms),
        manifest_list: format!("{}/{list_name}", table.meta.location),
        summary,
        schema_id: Some(table.meta.current_schema_id),
        rest: Default::default(),
    };
    let meta = table.meta.append(snapshot, &table.file);
    let name = next_metadata_name(Some(&table.file));
    create_new(storage, &name, meta.encode()).await?;
    Ok(Loaded {
        file: format!("{}/{name}", meta.location),
        meta,
    })
}
