//! Apache Iceberg tables (format version 2), as Sluice appends to them:
//! the table's metadata file ([`metadata`]), its manifests and manifest
//! lists ([`manifest`]), and its columns and the data files' schema
//! ([`schema`]), and the SQL catalog that names its current metadata file
//! ([`catalog`]).
//!
//! ```text
//! <location>/data/part-<batch>-<p>[-seq].<query>.parquet   data files (field ids)
//! <location>/metadata/<snapshot>-m0.avro                   a batch's manifest
//! <location>/metadata/snap-<snapshot>.avro                 its snapshot's manifest list
//! <location>/metadata/<version:05>-<uuid>.metadata.json    the table after it
//! ```

pub mod catalog;
pub mod manifest;
pub mod metadata;
pub mod schema;
