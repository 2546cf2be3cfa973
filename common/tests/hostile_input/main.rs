//! Hostile input to every parser of bytes that Sluice did not write
//! itself, or wrote and then read back from storage that may have damaged
//! them: the query spec (YAML, JSON and proto), the checkpoint records,
//! the sink manifests and the names of checkpoint, state and manifest
//! files.
//!
//! Each is fed fully random bytes and text, and mutations of valid input
//! (see [`mutate`]). None may panic, overflow the stack or hang; each
//! error names the problem (the spec's field or the line and column at
//! fault, the file a record was read from); and whatever does decode is
//! consistent: it encodes and decodes back to itself, and the code that
//! uses it finds what it relies on.

mod damaged_records;
mod manifests;
mod mutate;
mod records;
mod spec;

use proptest::prelude::ProptestConfig;

/// The cases of each property: enough to find a panic in seconds, few
/// enough for a debug build. No failure is persisted into the source tree;
/// a failure prints its minimal input, shrunk for at most ten seconds.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        max_shrink_time: 10_000,
        ..ProptestConfig::default()
    }
}

/// Whether the message of an error about a file read from `path` names it
/// and says where or what is wrong.
pub fn names_file(message: &str, path: &str) -> bool {
    let (Some(at), true) = (
        message.find(path),
        message.starts_with("damaged checkpoint file "),
    ) else {
        return false;
    };
    let reason = message[at + path.len()..].trim_start_matches(": ");
    !reason.trim().is_empty()
}
