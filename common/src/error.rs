//! The one error type of `sluice-common`. Every variant says whether the
//! operation that produced it may be retried.

use crate::storage::failure::{BackendError, is_permanent};

/// Errors from specs, storage, checkpoints, sources and sinks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A spec field is missing, unknown, malformed or out of range.
    #[error("invalid spec: field `{field}`: {reason}")]
    InvalidSpec { field: String, reason: String },

    /// Storage I/O failed. Whether it may succeed later depends on the
    /// cause: see [`Error::is_retryable`].
    #[error("storage error at {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: BackendError,
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

    /// An Iceberg catalog failed (`retryable`: it was busy or did not
    /// answer in time) or holds what Sluice cannot use.
    #[error("Iceberg catalog {catalog}: {reason}")]
    Catalog {
        catalog: String,
        reason: String,
        retryable: bool,
    },

    /// Data could not be encoded or decoded.
    #[error("encoding error: {0}")]
    Encoding(String),

    /// A call to a Kafka cluster failed: the `sluice-kafka` client's error,
    /// which says what was asked of which servers, as sources and sinks
    /// report it. Retryable as that error says: a broker that cannot be
    /// reached or answers with a transient error (yes), a topic or
    /// partition that does not exist (no).
    #[error("{error}")]
    Kafka {
        error: Box<dyn std::error::Error + Send + Sync>,
        retryable: bool,
    },

    /// Records a batch planned to read are gone from their partition
    /// (retention deleted them, or the topic was recreated), and the
    /// source says `fail_on_data_loss: true`.
    #[error("data loss: {0}")]
    DataLoss(String),
}

impl Error {
    /// True when the same operation may succeed if tried again.
    ///
    /// Storage errors are split by cause. Permanent: the path is not a
    /// directory or is one, permission is denied, the filesystem is
    /// read-only, the path is invalid or the operation is unsupported; no
    /// retry can fix these, so the query fails at once naming the path.
    /// Transient: anything else (no space, I/O errors, timeouts, a
    /// filesystem that is not mounted yet), retried with backoff.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Storage { source, .. } => !is_permanent(source),
            Error::Kafka { retryable, .. } | Error::Catalog { retryable, .. } => *retryable,
            _ => false,
        }
    }

    pub(crate) fn storage(path: impl std::fmt::Display, source: BackendError) -> Self {
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

/// An error and its sources, `outer: inner: root`, each cause once:
/// transport and client errors often say what went wrong only in their
/// sources ("connection refused").
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::failure::io_failure;
    use std::io::ErrorKind as K;

    #[test]
    fn storage_errors_are_split_by_cause_and_name_the_path() {
        let permanent = Error::storage("/sink/part-1", io_failure(K::NotADirectory));
        assert!(!permanent.is_retryable());
        assert!(
            permanent.to_string().contains("/sink/part-1"),
            "{permanent}"
        );
        assert!(Error::storage("/x", io_failure(K::StorageFull)).is_retryable());
        assert!(!Error::Config("x".into()).is_retryable());
    }
}
