//! The README's prerequisites are exact: the minimum Rust version it names
//! is the workspace's `rust-version`, and no locked dependency needs a newer
//! compiler than that.

use std::process::Command;

use sluice_tests::manifests::repo_root;

/// `X.Y` or `X.Y.Z` as numbers, for comparing (`1.89` is `1.89.0`).
fn version(v: &str) -> [u64; 3] {
    let mut out = [0; 3];
    for (slot, n) in out.iter_mut().zip(v.split('.')) {
        *slot = n.parse().unwrap_or_else(|_| panic!("not a version: {v:?}"));
    }
    out
}

/// `rust-version` under `[workspace.package]` in the root Cargo.toml.
fn workspace_rust_version() -> String {
    let text = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    text.lines()
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "rust-version").then(|| value.trim().trim_matches('"').to_string())
        })
        .expect("Cargo.toml sets rust-version")
}

#[test]
fn rust_version_covers_every_locked_dependency() {
    let ours = workspace_rust_version();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().expect("packages");
    assert!(packages.len() > 50, "too few packages: {}", packages.len());
    let newer: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(&ours))
                .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
        })
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version = {ours} in Cargo.toml, but: {newer:?}"
    );
}

#[test]
fn the_readme_names_the_same_minimum_rust() {
    let ours = workspace_rust_version();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let wanted = format!("Rust {ours} or later");
    assert!(
        readme.contains(&wanted),
        "README.md should say `{wanted}` (rust-version in Cargo.toml)"
    );
}
