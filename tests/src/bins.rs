//! Where the workspace's binary is: `$SLUICE_BIN_DIR`, else the target
//! directory this test executable was built into (`target/debug/deps/x` →
//! `target/debug`). Sluice is one binary, `sluice`; its subcommands
//! `driver` and `executor` run a cluster's nodes.

use std::path::PathBuf;

/// The one Sluice binary.
pub const CLI: &str = "sluice";
/// The subcommand of [`CLI`] that runs a driver.
pub const DRIVER: &str = "driver";
/// The subcommand of [`CLI`] that runs an executor.
pub const EXECUTOR: &str = "executor";

/// The program and arguments that run `node` ([`DRIVER`] or [`EXECUTOR`])
/// with `flags`: `sluice <node> <flags..>`.
pub fn node(node: &str, flags: Vec<String>) -> (PathBuf, Vec<String>) {
    assert!(
        node == DRIVER || node == EXECUTOR,
        "{node:?} is not a node of sluice"
    );
    let args = std::iter::once(node.to_string()).chain(flags).collect();
    (bin(CLI), args)
}

/// The directory that holds the binaries.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SLUICE_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test executable has a parent")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

/// The path of binary `name`. Panics with the fix when it is missing.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    if !path.is_file() {
        panic!(
            "binary {} not found: run `cargo build --workspace --bins` first \
             (or point SLUICE_BIN_DIR at the directory that holds it)",
            path.display()
        );
    }
    path
}
