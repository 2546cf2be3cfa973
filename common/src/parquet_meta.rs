//! Reading a Parquet file's footer through [`Storage`]: two small range
//! reads (the 8-byte tail, then the metadata), not the whole file.

use std::sync::Arc;

use parquet::file::metadata::{FooterTail, ParquetMetaData, ParquetMetaDataReader};

use crate::error::{Error, Result};
use crate::storage::Storage;

const TAIL: u64 = 8;

/// The metadata of the Parquet file `path` (under `storage`), of `size`
/// bytes. A file that is not Parquet is an error naming it.
pub async fn read(storage: &Storage, path: &str, size: u64) -> Result<Arc<ParquetMetaData>> {
    let bad = |reason: String| Error::Corrupt {
        path: storage.describe_str(path),
        reason,
    };
    if size < TAIL + 4 {
        return Err(bad(format!("not a Parquet file: {size} bytes")));
    }
    let tail = storage.get_range(path, size - TAIL..size).await?;
    let tail: [u8; TAIL as usize] = tail[..]
        .try_into()
        .map_err(|_| bad("short read of the footer".into()))?;
    let footer = FooterTail::try_new(&tail).map_err(|e| bad(format!("not a Parquet file: {e}")))?;
    let len = footer.metadata_length() as u64;
    if len + TAIL + 4 > size {
        return Err(bad(format!(
            "the footer claims {len} bytes of metadata in a file of {size}"
        )));
    }
    let meta = storage
        .get_range(path, size - TAIL - len..size - TAIL)
        .await?;
    let meta = ParquetMetaDataReader::decode_metadata(&meta)
        .map_err(|e| bad(format!("unreadable Parquet metadata: {e}")))?;
    Ok(Arc::new(meta))
}
