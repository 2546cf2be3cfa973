//! Shared building blocks of Sluice: the query spec, storage through
//! `object_store`, the checkpoint logs, the rate source, the file sink, the
//! exactly-once checker, errors and telemetry; the reading of small files
//! that specs and flags name, and where a spec's secrets may come from.

pub mod backoff;
pub mod checkpoint;
pub mod epochs;
pub mod error;
pub mod nexmark;
pub mod parquet_meta;
pub mod rate;
pub mod secrets;
pub mod shutdown;
pub mod sink;
pub mod small_file;
pub mod source_schema;
pub mod spec;
pub mod state;
pub mod storage;
pub mod telemetry;
pub mod time;
pub mod tls;
pub mod verify;

pub use error::{Error, Result};
