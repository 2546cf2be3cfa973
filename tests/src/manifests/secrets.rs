//! The Secrets the manifests mount, made the way deploy/README.md
//! ("Certificates and tokens") tells an operator to make them: its
//! `sluice certs init pki ...` line runs the real CLI into a test
//! directory, and each `kubectl -n sluice create secret generic NAME
//! --from-file=KEY=pki/FILE ...` line becomes a Secret whose `stringData`
//! holds the files' text, as `kubectl` would store them. A change to those
//! commands is therefore what the tests run.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::kustomize::{Manifests, repo_root};
use crate::bins::{CLI, bin};

/// The README that documents the Secrets.
pub const SECRETS_README: &str = "deploy/README.md";
/// The directory the README's commands write to and read from.
const PKI: &str = "pki";
const CERTS_INIT: &str = "sluice certs init pki ";
const CREATE_SECRET: &str = "kubectl -n sluice create secret generic ";

/// One documented `kubectl create secret generic` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretCommand {
    pub name: String,
    /// (key, file name under `pki/`).
    pub files: Vec<(String, String)>,
}

impl SecretCommand {
    /// True when the Secret has key `key`.
    pub fn has_key(&self, key: &str) -> bool {
        self.files.iter().any(|(k, _)| k == key)
    }
}

/// Words of a command line, single quotes removed (the README quotes the
/// wildcards for the shell).
fn words(line: &str) -> Vec<String> {
    line.split_whitespace()
        .map(|w| w.replace('\'', ""))
        .collect()
}

/// The README's `sluice certs init` arguments after the directory, and its
/// Secret commands. Panics when either is missing.
pub fn documented_secrets() -> (Vec<String>, Vec<SecretCommand>) {
    let text = std::fs::read_to_string(repo_root().join(SECRETS_README)).expect("read README");
    let init = text
        .lines()
        .find(|l| l.starts_with(CERTS_INIT))
        .unwrap_or_else(|| panic!("{SECRETS_README} has no `{CERTS_INIT}...` line"));
    let init_args = words(&init[CERTS_INIT.len()..]);
    let mut secrets = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(CREATE_SECRET)) {
        let mut rest = words(&line[CREATE_SECRET.len()..]).into_iter();
        let name = rest.next().expect("a Secret name");
        let files = rest
            .map(|w| {
                let spec = w
                    .strip_prefix("--from-file=")
                    .unwrap_or_else(|| panic!("{name}: unexpected word {w:?}"));
                let (key, path) = spec
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{name}: name the key: {spec}"));
                let file = path
                    .strip_prefix(&format!("{PKI}/"))
                    .unwrap_or_else(|| panic!("{name}: {path} is not under {PKI}/"));
                (key.to_string(), file.to_string())
            })
            .collect();
        secrets.push(SecretCommand { name, files });
    }
    assert!(
        secrets.len() >= 5,
        "{SECRETS_README}: only {} Secret commands",
        secrets.len()
    );
    (init_args, secrets)
}

/// Runs the README's `sluice certs init` into `<parent>/pki`, then builds
/// its Secrets (namespace `sluice`) from the files written there.
pub fn readme_secrets(parent: &Path) -> Manifests {
    let (init_args, commands) = documented_secrets();
    let dir = parent.join(PKI);
    let out = std::process::Command::new(bin(CLI))
        .args(["certs", "init"])
        .arg(&dir)
        .args(&init_args)
        .output()
        .expect("run sluice certs init");
    assert!(out.status.success(), "sluice certs init: {out:?}");
    secrets_of(&commands, |c, file| {
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{}: {file}: {e}", c.name))
    })
}

/// The README's Secrets with a placeholder in every key, for checks that
/// resolve environments without running anything.
pub fn placeholder_secrets() -> Manifests {
    let (_, commands) = documented_secrets();
    secrets_of(&commands, |c, file| format!("<{} from pki/{file}>", c.name))
}

/// A Secret per command, each key's text from `text(command, file)`.
fn secrets_of(
    commands: &[SecretCommand],
    text: impl Fn(&SecretCommand, &str) -> String,
) -> Manifests {
    let objects = commands
        .iter()
        .map(|c| {
            let data: Map<String, Value> = c
                .files
                .iter()
                .map(|(key, file)| (key.clone(), Value::from(text(c, file))))
                .collect();
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": c.name, "namespace": "sluice"},
                "type": "Opaque",
                "stringData": data,
            })
        })
        .collect();
    Manifests { objects }
}
