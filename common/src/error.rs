//! The one error type of `sluice-common`. Every variant says whether the
//! operation that produced it may be retried.

/// Errors from specs, storage, checkpoints, sources and sinks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A spec field is missing, unknown, malformed or out of range.
    #[error("invalid spec: field `{field}`: {reason}")]
    InvalidSpec { field: String, reason: String },

    /// Storage I/O failed; it may succeed later.
    #[error("storage error at {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: object_store::Error,
    },

    /// A checkpoint or sink file exists but cannot be understood.
    #[error("damaged checkpoint file {path}: {reason}")]
    Corrupt { path: String, reason: String },

    /// A create-only file already exists with different content: a task was
    /// not deterministic, which would break exactly-once.
    #[error("file {path} already exists with different content")]
    Conflict { path: String },

    /// A location or setting cannot be used at all.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// Data could not be encoded or decoded.
    #[error("encoding error: {0}")]
    Encoding(String),
}

impl Error {
    /// True when the same operation may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Storage { .. })
    }

    pub(crate) fn storage(path: impl std::fmt::Display, source: object_store::Error) -> Self {
        Error::Storage {
            path: path.to_string(),
            source,
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidSpec {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
