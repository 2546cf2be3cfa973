//! Where the secrets a spec names may come from: files only inside the
//! directory the operator names with `--secrets-dir`, environment
//! variables only with a name that starts with a prefix the operator gives
//! with `--secret-env-prefix`, on the driver and on every executor. A spec
//! is written by whoever may submit; without this, a spec could make a
//! process send any file it can read, or any variable of its environment,
//! to a broker of the spec's choosing as a password.
//!
//! ```text
//!  --secrets-dir D, --secret-env-prefix P ──► Secrets
//!  check_file(field, path)  lexical: D set? no `..`? relative ─► D/path; absolute ─► under D?
//!  read_file(field, path)   check_file, then (on a reader thread, with a deadline)
//!                           symbolic links followed: still under D? ─► small_file::read
//!  check_env(field, var)    P set? var starts with a prefix of P?
//!  read_env(field, var)     check_env, then the variable
//! ```
//!
//! Invariants, enforced here: a path outside D gets the same error whether
//! or not it exists (the lexical check comes before any look at the disk,
//! and a link that leads out gets the same words); a file is read only
//! once its real path (links followed: Kubernetes mounts a Secret as links
//! inside its directory) is inside D's real path; without D no file is
//! read, without P no variable. Errors name the field and the flag, never
//! a secret.

use std::path::{Component, Path, PathBuf};

use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::small_file::{self, Limits};

/// The flag of the directory.
pub const DIR_FLAG: &str = "--secrets-dir";
/// The flag of the variable prefixes.
pub const ENV_FLAG: &str = "--secret-env-prefix";

/// The prefix of Sluice's own variables (its settings and its tokens).
const OWN_PREFIX: &str = "SLUICE_";

/// The operator's policy; the default allows no file and no variable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    dir: Option<Dir>,
    env_prefixes: Vec<String>,
}

/// `--secrets-dir`: as given (`.` and `..` resolved) and with its links
/// followed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dir {
    given: PathBuf,
    real: PathBuf,
}

impl Secrets {
    /// The policy of `--secrets-dir` (an absolute path to a directory that
    /// exists) and `--secret-env-prefix` (blank entries ignored); the
    /// error names the flag.
    pub fn new<S: AsRef<str>>(
        dir: Option<&Path>,
        env_prefixes: &[S],
    ) -> std::result::Result<Secrets, String> {
        let dir = match dir.filter(|d| !d.as_os_str().is_empty()) {
            None => None,
            Some(d) if !d.is_absolute() => {
                return Err(format!("{DIR_FLAG} {}: give an absolute path", d.display()));
            }
            Some(d) => {
                let real = std::fs::canonicalize(d)
                    .map_err(|e| format!("{DIR_FLAG} {}: {e}", d.display()))?;
                if !real.is_dir() {
                    return Err(format!("{DIR_FLAG} {}: not a directory", d.display()));
                }
                Some(Dir {
                    given: crate::storage::normalize(d),
                    real,
                })
            }
        };
        let mut prefixes = Vec::new();
        for p in env_prefixes.iter().map(|p| p.as_ref().trim()) {
            if p.is_empty() {
                continue;
            }
            if !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "{ENV_FLAG} {p:?}: a prefix of variable names is letters, digits and _"
                ));
            }
            if p.starts_with(OWN_PREFIX) || OWN_PREFIX.starts_with(p) {
                return Err(format!(
                    "{ENV_FLAG} {p}: would let a spec read Sluice's own variables \
                     ({OWN_PREFIX}*: its settings and tokens); choose another prefix"
                ));
            }
            prefixes.push(p.to_string());
        }
        Ok(Secrets {
            dir,
            env_prefixes: prefixes,
        })
    }

    /// `--secrets-dir`, as given.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.given.as_path())
    }

    /// `--secret-env-prefix`.
    pub fn env_prefixes(&self) -> &[String] {
        &self.env_prefixes
    }

    /// Checks that file setting `field` may name `path`, by its words
    /// alone; returns where it is (a relative path is inside the
    /// directory). Pure.
    pub fn check_file(&self, field: &str, path: &str) -> Result<PathBuf> {
        let Some(dir) = &self.dir else {
            return Err(Error::invalid(
                field,
                format!(
                    "names a file, and this process has no {DIR_FLAG}: a spec's passwords, \
                     certificates and keys are read only from the directory the operator \
                     names with {DIR_FLAG} on the driver and the executors"
                ),
            ));
        };
        let p = Path::new(path);
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(Error::invalid(
                field,
                format!("{path} has a `..` in it; name a file inside {DIR_FLAG}"),
            ));
        }
        let at = crate::storage::normalize(&dir.given.join(p));
        let inside = |root: &Path| at.starts_with(root) && at != root;
        if !(inside(&dir.given) || inside(&dir.real)) {
            return Err(dir.outside(field, path));
        }
        Ok(at)
    }

    /// The bytes of the file `path` named by `field`: checked by
    /// [`Secrets::check_file`], then with its links followed, then read as
    /// [`small_file::read`] does (a regular file of at most
    /// [`Limits::SECRET`]).
    pub fn read_file(&self, field: &str, path: &str) -> Result<Zeroizing<Vec<u8>>> {
        let at = self.check_file(field, path)?;
        let dir = self.dir.as_ref().expect("check_file needs a directory");
        let (real_dir, outside) = (dir.real.clone(), dir.outside_reason());
        small_file::read_confined(&at, Limits::SECRET, move |real| {
            match real.starts_with(&real_dir) {
                true => Ok(()),
                false => Err(outside),
            }
        })
        .map(Zeroizing::new)
        .map_err(|why| Error::invalid(field, format!("{path} {why}")))
    }

    /// Checks that variable setting `field` may name `var`. Pure.
    pub fn check_env(&self, field: &str, var: &str) -> Result<()> {
        if self.env_prefixes.is_empty() {
            return Err(Error::invalid(
                field,
                format!(
                    "names an environment variable, and this process has no {ENV_FLAG}: a \
                     spec may name only variables whose names start with a prefix the \
                     operator gives with {ENV_FLAG} on the driver and the executors"
                ),
            ));
        }
        if !self
            .env_prefixes
            .iter()
            .any(|p| var.starts_with(p.as_str()))
        {
            return Err(Error::invalid(
                field,
                format!(
                    "{var} does not start with a prefix of {ENV_FLAG} ({}): a spec may name \
                     only such variables",
                    self.env_prefixes.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The value of variable `var` named by `field`, checked by
    /// [`Secrets::check_env`].
    pub fn read_env(&self, field: &str, var: &str) -> Result<Zeroizing<String>> {
        self.check_env(field, var)?;
        std::env::var(var).map(Zeroizing::new).map_err(|_| {
            Error::invalid(
                field,
                format!("the environment variable {var} is not set in this process"),
            )
        })
    }
}

impl Dir {
    /// The one error of a path outside the directory, whether it exists
    /// or not, and whether its words or its links lead out.
    fn outside(&self, field: &str, path: &str) -> Error {
        Error::invalid(field, format!("{path} {}", self.outside_reason()))
    }

    fn outside_reason(&self) -> String {
        format!(
            "is outside {DIR_FLAG} {}: a spec names only files in that directory (a \
             relative path is taken inside it)",
            self.given.display()
        )
    }
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
