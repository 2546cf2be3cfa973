//! What a location string names: a directory on a local or shared
//! filesystem (an absolute path or a `file://` URL), or a prefix in an
//! object store bucket (`s3://`, `gs://`, `az://`). Pure: nothing here
//! touches a disk or the network, except [`check_sink_location`], which
//! reads local metadata.

use std::path::{Component, PathBuf};

/// The object store URL schemes Sluice accepts.
pub const OBJECT_SCHEMES: [&str; 3] = ["s3", "gs", "az"];

/// A parsed location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory on a local or shared filesystem.
    Local(PathBuf),
    /// A prefix in an object store bucket.
    Object {
        /// `s3`, `gs` or `az`.
        scheme: String,
        /// The bucket (or container).
        bucket: String,
        /// The prefix inside the bucket, without leading or trailing `/`.
        prefix: String,
    },
}

impl Location {
    /// Parses `location`, or says why it cannot be used.
    pub fn parse(location: &str) -> Result<Self, String> {
        if let Some(path) = location.strip_prefix("file://") {
            return local(location, path);
        }
        let Some((scheme, _)) = location.split_once("://") else {
            return local(location, location);
        };
        if !OBJECT_SCHEMES.contains(&scheme) {
            return Err(format!(
                "unsupported location {location:?}: use an absolute path, a file:// URL \
                 or an s3://, gs:// or az:// URL"
            ));
        }
        let rest = &location[scheme.len() + 3..];
        if rest.contains(['?', '#']) {
            return Err(format!("{location:?} has a query or fragment"));
        }
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{location:?} names no bucket"));
        }
        if !bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!("{location:?}: {bucket:?} is not a bucket name"));
        }
        let prefix = path.trim_end_matches('/').to_string();
        if !prefix.is_empty()
            && prefix
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(format!(
                "{location:?} has an empty, `.` or `..` path segment"
            ));
        }
        Ok(Location::Object {
            scheme: scheme.to_string(),
            bucket: bucket.to_string(),
            prefix,
        })
    }

    /// `scheme://bucket` of an object location.
    pub fn bucket_url(&self) -> Option<String> {
        match self {
            Location::Local(_) => None,
            Location::Object { scheme, bucket, .. } => Some(format!("{scheme}://{bucket}")),
        }
    }

    /// The location with `.` dropped and `..` resolved (local paths), as
    /// `/`-separated components under a root that names the filesystem
    /// (`""`) or the bucket (`s3://bucket`).
    pub(super) fn components(&self) -> (String, Vec<String>) {
        match self {
            Location::Local(p) => (
                String::new(),
                normalize(p)
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                        _ => None,
                    })
                    .collect(),
            ),
            Location::Object {
                scheme,
                bucket,
                prefix,
            } => (
                format!("{scheme}://{bucket}"),
                prefix
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            ),
        }
    }
}

fn local(location: &str, path: &str) -> Result<Location, String> {
    let p = PathBuf::from(path);
    if !p.is_absolute() {
        return Err(format!("{location:?} is not an absolute path"));
    }
    Ok(Location::Local(p))
}

/// Checks that `location` can be parsed (see [`Location::parse`]).
pub fn validate_location(location: &str) -> Result<(), String> {
    Location::parse(location).map(|_| ())
}

/// Whether two locations overlap: one is the other or lies inside it, on
/// the same filesystem or in the same bucket. `.` and `..` are resolved
/// lexically first (symbolic links are not followed).
pub fn locations_overlap(a: &str, b: &str) -> bool {
    match (Location::parse(a), Location::parse(b)) {
        (Ok(a), Ok(b)) => {
            let ((ra, a), (rb, b)) = (a.components(), b.components());
            ra == rb && (a.starts_with(&b) || b.starts_with(&a))
        }
        _ => false,
    }
}

/// Filesystems no sink may write to.
const VIRTUAL_ROOTS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// What can be known before any write that a local sink at `location` can
/// never work: it lies on a virtual filesystem, or it (or a directory above
/// it) exists and is not a directory. Reads metadata only. Object store
/// locations are checked by [`super::Stores::probe`].
pub fn check_sink_location(location: &str) -> Result<(), String> {
    let path = match Location::parse(location)? {
        Location::Local(p) => normalize(&p),
        Location::Object { .. } => return Ok(()),
    };
    if let Some(root) = VIRTUAL_ROOTS.iter().find(|r| path.starts_with(r)) {
        return Err(format!(
            "{} is under {root}, a virtual filesystem",
            path.display()
        ));
    }
    let mut at = Some(path.as_path());
    while let Some(p) = at {
        if let Ok(meta) = std::fs::metadata(p) {
            if !meta.is_dir() {
                return Err(format!("{} exists and is not a directory", p.display()));
            }
            return Ok(());
        }
        at = p.parent();
    }
    Ok(())
}

/// `path` with `.` dropped and each `..` taking away the component before it.
pub(crate) fn normalize(path: &std::path::Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_that_can_never_work_are_known_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let at = |p: &std::path::Path| check_sink_location(p.to_str().unwrap());
        assert!(at(&file).unwrap_err().contains("not a directory"));
        assert!(at(&file.join("below")).unwrap_err().contains("file"));
        assert!(at(&dir.path().join("new/deeper")).is_ok());
        assert!(at(dir.path()).is_ok());
        let proc = check_sink_location("/proc/self/out").unwrap_err();
        assert!(proc.contains("/proc"), "{proc}");
        assert!(
            check_sink_location("/x/../sys/y")
                .unwrap_err()
                .contains("/sys")
        );
        assert!(check_sink_location("s3://bucket/out").is_ok());
    }

    #[test]
    fn overlap_is_by_whole_components_after_normalizing() {
        assert!(locations_overlap("/data/out", "/data/out"));
        assert!(locations_overlap("/data/out/", "file:///data/out"));
        assert!(locations_overlap("/data/out/a", "/data/out"));
        assert!(locations_overlap("/data", "/data/out/a"));
        assert!(locations_overlap("/data/x/../out/./a", "/data/out"));
        assert!(locations_overlap("/data/out/../../data/out", "/data/out/b"));
        assert!(!locations_overlap("/data/out", "/data/out-2"));
        assert!(!locations_overlap("/data/out/../out-2", "/data/out"));
        assert!(!locations_overlap("/a", "/b"));
    }

    #[test]
    fn object_locations_overlap_within_one_bucket() {
        assert!(locations_overlap("s3://b/x", "s3://b/x/"));
        assert!(locations_overlap("s3://b", "s3://b/x/y"));
        assert!(locations_overlap("s3://b/x/y", "s3://b/x"));
        assert!(!locations_overlap("s3://b/x", "s3://b/x-2"));
        assert!(!locations_overlap("s3://b/x", "s3://c/x"));
        assert!(!locations_overlap("s3://b/x", "gs://b/x"));
        assert!(!locations_overlap("/b/x", "s3://b/x"));
    }

    #[test]
    fn locations_are_absolute_paths_or_object_store_urls() {
        assert!(validate_location("/a/b").is_ok());
        assert!(validate_location("file:///a/b").is_ok());
        assert!(validate_location("a/b").is_err());
        assert_eq!(
            Location::parse("s3://bucket/x/y/").unwrap(),
            Location::Object {
                scheme: "s3".into(),
                bucket: "bucket".into(),
                prefix: "x/y".into()
            }
        );
        assert!(validate_location("gs://bucket").is_ok());
        assert!(validate_location("az://container/p").is_ok());
        let bad = [
            ("http://host/x", "unsupported"),
            ("s3:///x", "no bucket"),
            ("s3://b/x//y", "empty"),
            ("s3://b/x/../y", "segment"),
            ("s3://b/x?versionId=1", "query"),
        ];
        for (loc, why) in bad {
            let err = validate_location(loc).unwrap_err();
            assert!(err.contains(why), "{loc}: {err}");
        }
    }
}
