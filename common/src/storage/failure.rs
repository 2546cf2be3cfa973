//! How storage failures are classified: permanent (fail the query at once,
//! naming the path) or transient (retry with backoff).

use std::io::ErrorKind as K;

/// The storage backend's own error, kept as the source of `Error::Storage`.
pub type BackendError = object_store::Error;

/// True when no retry can fix `e`: the path is not a directory or is one,
/// permission is denied, the filesystem is read-only, the path is invalid
/// or the operation is unsupported. Anything else (no space, I/O errors,
/// timeouts, a filesystem that is not mounted yet) is transient. An I/O
/// error anywhere in the source chain decides.
pub fn is_permanent(e: &BackendError) -> bool {
    use object_store::Error as O;
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

/// A backend error caused by an I/O error of `kind`, as the local
/// filesystem store reports one.
#[cfg(test)]
pub fn io_failure(kind: K) -> BackendError {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: Box::new(std::io::Error::from(kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_are_split_by_cause() {
        for kind in [
            K::NotADirectory,
            K::IsADirectory,
            K::PermissionDenied,
            K::ReadOnlyFilesystem,
        ] {
            assert!(is_permanent(&io_failure(kind)), "{kind:?} is permanent");
        }
        for kind in [K::StorageFull, K::TimedOut, K::Other, K::NotFound] {
            assert!(!is_permanent(&io_failure(kind)), "{kind:?} is transient");
        }
        let denied = object_store::Error::PermissionDenied {
            path: "/x".into(),
            source: "no".into(),
        };
        assert!(is_permanent(&denied));
    }
}
