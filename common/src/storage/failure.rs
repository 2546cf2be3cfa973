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
    if refusal(e).is_some() {
        return true;
    }
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

/// Why an object store refused a request for good, from the error code in
/// its reply (`<Code>NoSuchBucket</Code>`): object_store reports some
/// replies (a LIST's) only as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The bucket does not exist or its name is invalid.
    NoBucket,
    /// The credentials are unknown, wrong or not allowed.
    Denied,
}

const REFUSALS: [(&str, Refusal); 7] = [
    ("NoSuchBucket", Refusal::NoBucket),
    ("InvalidBucketName", Refusal::NoBucket),
    ("AccessDenied", Refusal::Denied),
    ("InvalidAccessKeyId", Refusal::Denied),
    ("SignatureDoesNotMatch", Refusal::Denied),
    ("AuthorizationHeaderMalformed", Refusal::Denied),
    ("ExpiredToken", Refusal::Denied),
];

/// The refusal in `e`, if the store's reply names one.
pub fn refusal(e: &BackendError) -> Option<Refusal> {
    use object_store::Error as O;
    match e {
        O::PermissionDenied { .. } | O::Unauthenticated { .. } => return Some(Refusal::Denied),
        O::Generic { .. } => {}
        _ => return None,
    }
    let text = e.to_string();
    REFUSALS
        .iter()
        .find(|(code, _)| text.contains(&format!("<Code>{code}</Code>")))
        .map(|(_, r)| *r)
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
        let reply = |code: &str| object_store::Error::Generic {
            store: "S3",
            source: format!("list: 404: <Error><Code>{code}</Code></Error>").into(),
        };
        assert_eq!(refusal(&reply("NoSuchBucket")), Some(Refusal::NoBucket));
        assert_eq!(refusal(&reply("InvalidAccessKeyId")), Some(Refusal::Denied));
        assert!(is_permanent(&reply("AccessDenied")));
        assert_eq!(refusal(&reply("SlowDown")), None);
        assert!(!is_permanent(&reply("SlowDown")), "503 SlowDown is retried");
    }
}
