//! Operator-allowed path prefixes (`--allowed-paths`): the only places a
//! query's sources, tables and sinks may be.
//!
//! ```text
//!  "/data,s3://bucket/in" ──parse──► AllowedPaths
//!  check(field, location)            lexical: `.` and `..` resolved, whole segments
//!  check_resolved(field, location)   the same, then local symbolic links followed
//!  check_file_resolved(field, root, file)   one input file of a task
//!  check_input_resolved(field, location)    and the links directly inside a directory
//! ```
//!
//! A location is allowed when it is one of the prefixes or lies inside one,
//! on the same filesystem or in the same bucket, compared by whole path
//! segments: `/data/out` allows `/data/out/a`, never `/data/out-2`. A local
//! path and a `file://` URL are the same place. [`AllowedPaths::check`] is
//! pure. The `_resolved` checks read the disk: they also follow the
//! symbolic links of a local location (the deepest ancestor that exists,
//! canonicalized, with the rest appended) and compare the result with the
//! prefixes resolved the same way, so that a link inside an allowed
//! directory cannot lead outside it. The driver checks a spec at submit;
//! each executor checks its task again when it runs it, since a link can
//! appear after submit.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::Location;
use super::location::normalize;

/// How many symbolic links one resolution follows through targets that do
/// not exist before it stops (as the kernel's ELOOP limit).
const MAX_LINKS: usize = 40;

/// A location as segments under a root: `""` for the local filesystem,
/// `scheme://bucket` for a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segments {
    root: String,
    parts: Vec<String>,
}

impl Segments {
    fn of(location: &Location) -> Self {
        let (root, parts) = location.components();
        Segments { root, parts }
    }

    fn is_local(&self) -> bool {
        self.root.is_empty()
    }

    /// The local path of these segments.
    fn path(&self) -> PathBuf {
        let mut p = PathBuf::from("/");
        p.extend(&self.parts);
        p
    }

    fn within(&self, prefix: &Segments) -> bool {
        self.root == prefix.root && self.parts.starts_with(&prefix.parts)
    }
}

impl fmt::Display for Segments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.root, self.parts.join("/"))
    }
}

/// The prefixes under which sources, tables and sinks may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedPaths {
    prefixes: Vec<Segments>,
}

impl AllowedPaths {
    /// Parses prefixes: absolute paths, `file://` URLs or `s3://`, `gs://`,
    /// `az://` URLs. The error names the first one that is not.
    pub fn parse<S: AsRef<str>>(prefixes: &[S]) -> Result<Self, String> {
        if prefixes.is_empty() {
            return Err("give at least one prefix".into());
        }
        let mut out = Vec::new();
        for p in prefixes {
            let p = p.as_ref().trim();
            if p.is_empty() {
                return Err("an empty prefix".into());
            }
            let s = Segments::of(&Location::parse(p)?);
            if !out.contains(&s) {
                out.push(s);
            }
        }
        Ok(AllowedPaths { prefixes: out })
    }

    /// The data directory of a driver: the directory that holds its
    /// checkpoint root (`/data/checkpoints` → `/data`,
    /// `s3://bucket/ckpt` → `s3://bucket/`; for a root directly under `/`
    /// or at the top of a bucket, the whole filesystem or bucket).
    pub fn data_dir_of(checkpoint_root: &str) -> Result<Self, String> {
        let mut s = Segments::of(&Location::parse(checkpoint_root)?);
        s.parts.pop();
        Ok(AllowedPaths { prefixes: vec![s] })
    }

    /// The prefixes, normalized, as they appear in errors.
    pub fn prefixes(&self) -> Vec<String> {
        self.prefixes.iter().map(ToString::to_string).collect()
    }

    /// Whether `location` lies under a prefix, compared lexically. The
    /// error starts with `field` and names the prefixes.
    pub fn check(&self, field: &str, location: &str) -> Result<(), String> {
        let parsed = Location::parse(location).map_err(|r| format!("{field}: {r}"))?;
        self.check_segments(field, location, &Segments::of(&parsed))
    }

    /// [`Self::check`], then, for a local location, the same with its
    /// symbolic links followed. Reads the disk.
    pub fn check_resolved(&self, field: &str, location: &str) -> Result<(), String> {
        self.check(field, location)?;
        match Location::parse(location) {
            Ok(Location::Local(path)) => self.check_real(field, location, &path),
            _ => Ok(()),
        }
    }

    /// [`Self::check_resolved`] of the file `file` (a `/`-separated path)
    /// under the input directory `root`, as a task names them. In a
    /// bucket a key is taken as it is written; nothing there is a link.
    pub fn check_file_resolved(&self, field: &str, root: &str, file: &str) -> Result<(), String> {
        let parsed = Location::parse(root).map_err(|r| format!("{field}: {r}"))?;
        let below = file.split('/').filter(|s| !s.is_empty());
        match parsed {
            Location::Local(mut path) => {
                path.extend(below);
                let shown = path.display().to_string();
                let lexical = Segments::of(&Location::Local(path.clone()));
                self.check_segments(field, &shown, &lexical)?;
                self.check_real(field, &shown, &path)
            }
            object => {
                let mut s = Segments::of(&object);
                s.parts.extend(below.map(str::to_string));
                self.check_segments(field, &s.to_string(), &s)
            }
        }
    }

    /// [`Self::check_resolved`] of an input (one file or a directory),
    /// and of each symbolic link directly inside a local directory, where
    /// a source or a table finds its files (names starting with `.` or `_`
    /// are not read, and not checked).
    pub fn check_input_resolved(&self, field: &str, location: &str) -> Result<(), String> {
        self.check_resolved(field, location)?;
        let Ok(Location::Local(dir)) = Location::parse(location) else {
            return Ok(());
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let hidden = name.to_str().is_none_or(|n| n.starts_with(['.', '_']));
            if hidden || !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            let path = entry.path();
            self.check_real(field, &path.display().to_string(), &path)?;
        }
        Ok(())
    }

    fn check_segments(&self, field: &str, shown: &str, s: &Segments) -> Result<(), String> {
        if self.prefixes.iter().any(|p| s.within(p)) {
            Ok(())
        } else {
            Err(format!(
                "{field}: {shown} is outside the allowed paths {self}"
            ))
        }
    }

    /// The local `path` with its links followed, against the local
    /// prefixes with theirs followed.
    fn check_real(&self, field: &str, shown: &str, path: &Path) -> Result<(), String> {
        let real = resolve(path);
        let within = self
            .prefixes
            .iter()
            .filter(|p| p.is_local())
            .any(|p| real.starts_with(resolve(&p.path())));
        if within {
            Ok(())
        } else {
            Err(format!(
                "{field}: {shown} resolves to {}, outside the allowed paths {self}",
                real.display()
            ))
        }
    }
}

impl fmt::Display for AllowedPaths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.prefixes().join(", "))
    }
}

/// Whether locations `a` and `b` overlap (one is, contains or lies inside
/// the other) as written or, both local, with their symbolic links
/// followed ([`resolve`]): a sink that is a link into a checkpoint
/// overlaps it. Reads the disk.
pub fn overlap_resolved(a: &str, b: &str) -> bool {
    if super::locations_overlap(a, b) {
        return true;
    }
    match (Location::parse(a), Location::parse(b)) {
        (Ok(Location::Local(a)), Ok(Location::Local(b))) => {
            let (a, b) = (resolve(&a), resolve(&b));
            a.starts_with(&b) || b.starts_with(&a)
        }
        _ => false,
    }
}

/// Where the absolute `path` really is: its deepest existing ancestor
/// canonicalized (every symbolic link followed), with the rest appended
/// and `..` resolved. A link whose target does not exist yet is followed
/// to where it points.
pub fn resolve(path: &Path) -> PathBuf {
    resolve_from(path, 0)
}

fn resolve_from(path: &Path, links: usize) -> PathBuf {
    let parts: Vec<Component<'_>> = path.components().collect();
    for i in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..i].iter().collect();
        if let Ok(real) = std::fs::canonicalize(&head) {
            let mut out = real;
            out.extend(&parts[i..]);
            return normalize(&out);
        }
        if links < MAX_LINKS
            && let Ok(target) = std::fs::read_link(&head)
        {
            let mut next = head.parent().map(Path::to_path_buf).unwrap_or_default();
            next.push(target);
            next.extend(&parts[i..]);
            return resolve_from(&next, links + 1);
        }
    }
    normalize(path)
}

#[cfg(test)]
#[path = "allowed_tests.rs"]
mod tests;
