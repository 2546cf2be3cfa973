//! Where the workspace's binaries are: `$SLUICE_BIN_DIR`, else the target
//! directory this test executable was built into (`target/debug/deps/x` →
//! `target/debug`).

use std::path::PathBuf;

pub const DRIVER: &str = "sluice-driver";
pub const EXECUTOR: &str = "sluice-executor";
pub const CLI: &str = "sluice";

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
