//! The one error type of `sluice-common`. Every variant says whether the
//! operation that produced it may be retried.

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
    ///
    /// Storage errors are split by cause. Permanent: the path is not a
    /// directory or is one, permission is denied, the filesystem is
    /// read-only, the path is invalid or the operation is unsupported; no
    /// retry can fix these, so the query fails at once naming the path.
    /// Transient: anything else (no space, I/O errors, timeouts, a
    /// filesystem that is not mounted yet), retried with backoff.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Storage { source, .. } => !storage_is_permanent(source),
            _ => false,
        }
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

/// See [`Error::is_retryable`].
fn storage_is_permanent(e: &object_store::Error) -> bool {
    use object_store::Error as O;
    use std::io::ErrorKind as K;
    if matches!(
        e,
        O::PermissionDenied { .. }
            | O::Unauthenticated { .. }
            | O::NotSupported { .. }
            | O::InvalidPath { .. }
            | O::NotImplemented { .. }
    ) {
        return true;
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                K::NotADirectory | K::IsADirectory | K::PermissionDenied | K::ReadOnlyFilesystem
            );
        }
        next = err.source();
    }
    false
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind as K;

    fn io_storage(kind: K) -> Error {
        Error::storage(
            "/sink/part-1",
            object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(std::io::Error::from(kind)),
            },
        )
    }

    #[test]
    fn storage_errors_are_split_by_cause() {
        for kind in [
            K::NotADirectory,
            K::IsADirectory,
            K::PermissionDenied,
            K::ReadOnlyFilesystem,
        ] {
            assert!(!io_storage(kind).is_retryable(), "{kind:?} is permanent");
        }
        for kind in [K::StorageFull, K::TimedOut, K::Other, K::NotFound] {
            assert!(io_storage(kind).is_retryable(), "{kind:?} is transient");
        }
        let denied = Error::storage(
            "/x",
            object_store::Error::PermissionDenied {
                path: "/x".into(),
                source: "no".into(),
            },
        );
        assert!(!denied.is_retryable());
        assert!(
            io_storage(K::NotADirectory)
                .to_string()
                .contains("/sink/part-1")
        );
    }
}
