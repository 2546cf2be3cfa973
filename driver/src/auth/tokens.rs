//! The token file of `--auth-tokens`: each entry holds a token's SHA-256
//! hash (never the token) and a role.
//!
//! ```yaml
//! tokens:
//!   - name: ops                 # shown in logs and errors, never the token
//!     role: admin               # admin | viewer | executor
//!     sha256: 9f86d081884c7d65… # hex SHA-256 of the token
//! ```
//!
//! `sluice token new --role ROLE` prints a fresh token and its entry.

use std::collections::HashMap;
use std::path::Path;

use ring::digest::{SHA256, digest};
use serde::Deserialize;
use sluice_common::small_file::{self, Limits};

use super::{Role, TokenCheck};
use crate::error::DriverError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tokens: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    role: Role,
    sha256: String,
}

/// The known tokens, by hash.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], (String, Role)>,
}

impl Tokens {
    /// Reads and checks a token file (a regular file of at most
    /// [`Limits::DOCUMENT`]); every error names the file and entry.
    pub fn load(path: &Path) -> Result<Self, DriverError> {
        let text = small_file::read_text(path, Limits::DOCUMENT).map_err(|why| {
            DriverError::Config(format!("--auth-tokens {}: {why}", path.display()))
        })?;
        Tokens::parse(&text)
            .map_err(|e| DriverError::Config(format!("--auth-tokens {}: {e}", path.display())))
    }

    /// Parses the YAML text of a token file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        let mut by_hash = HashMap::new();
        for (i, entry) in file.tokens.into_iter().enumerate() {
            let at = format!("tokens[{i}] ({:?})", entry.name);
            if entry.name.trim().is_empty() {
                return Err(format!("tokens[{i}].name must not be empty"));
            }
            let hash = parse_hash(&entry.sha256)
                .ok_or_else(|| format!("{at}.sha256 must be 64 hex digits"))?;
            if by_hash.insert(hash, (entry.name, entry.role)).is_some() {
                return Err(format!("{at}: the same token is listed twice"));
            }
        }
        if by_hash.is_empty() {
            return Err("lists no tokens".into());
        }
        Ok(Tokens { by_hash })
    }

    /// The entry a presented token matches.
    pub fn check(&self, token: &str) -> TokenCheck {
        self.check_hash(&hash_bytes(token))
    }

    /// The entry a token of SHA-256 `hash` matches (a UI session keeps the
    /// hash of the token it was opened with, never the token).
    pub fn check_hash(&self, hash: &[u8; 32]) -> TokenCheck {
        match self.by_hash.get(hash) {
            Some((name, role)) => TokenCheck::Known {
                name: name.clone(),
                role: *role,
            },
            None => TokenCheck::Unknown,
        }
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// The hex SHA-256 of a token, as a token file stores it.
pub fn hash_token(token: &str) -> String {
    hash_bytes(token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh random token: 32 bytes, hex.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a token.
pub fn hash_bytes(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, token.as_bytes()).as_ref());
    out
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_tokens_and_roles() {
        let admin = new_token();
        let text = format!(
            "tokens:\n  - name: ops\n    role: admin\n    sha256: {}\n  - name: dash\n    role: viewer\n    sha256: {}\n",
            hash_token(&admin),
            hash_token("viewer-token")
        );
        let t = Tokens::parse(&text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.check(&admin),
            TokenCheck::Known {
                name: "ops".into(),
                role: Role::Admin
            }
        );
        assert!(matches!(
            t.check("viewer-token"),
            TokenCheck::Known {
                role: Role::Viewer,
                ..
            }
        ));
        assert_eq!(t.check("guess"), TokenCheck::Unknown);
        // The well-known SHA-256 of "test".
        assert_eq!(
            hash_token("test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }

    #[test]
    fn bad_files_name_the_entry() {
        let e =
            Tokens::parse("tokens:\n  - name: a\n    role: root\n    sha256: 00\n").unwrap_err();
        assert!(e.contains("role"), "{e}");
        let e =
            Tokens::parse("tokens:\n  - name: a\n    role: admin\n    sha256: abc\n").unwrap_err();
        assert!(e.contains("tokens[0] (\"a\").sha256"), "{e}");
        let h = hash_token("x");
        let two = format!(
            "tokens:\n  - {{name: a, role: admin, sha256: {h}}}\n  - {{name: b, role: viewer, sha256: {h}}}\n"
        );
        assert!(Tokens::parse(&two).unwrap_err().contains("twice"));
        assert!(
            Tokens::parse("tokens: []\n")
                .unwrap_err()
                .contains("no tokens")
        );
    }
    /// A flag's file is read only when it is a regular file: a device or
    /// a named pipe is refused at once, naming the flag.
    #[test]
    fn a_device_or_a_pipe_is_no_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("tokens.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let started = std::time::Instant::now();
        for (path, what) in [
            (Path::new("/dev/zero"), "is a character device"),
            (fifo.as_path(), "is a named pipe (FIFO)"),
        ] {
            let e = Tokens::load(path).unwrap_err().to_string();
            assert!(
                e.contains(&format!("--auth-tokens {}: {what}", path.display())),
                "{e}"
            );
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
