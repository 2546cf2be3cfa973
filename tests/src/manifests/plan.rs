//! [`LocalPlan`]: the pods of a set of workloads mapped onto this machine,
//! each a [`LocalPod`] with local ports and mounts, and the
//! [`LocalCommand`] that runs a container of one with its command, args
//! and environment made local. Volumes are planned in `volumes`, DNS names
//! in `routes`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::env::{PodFacts, expand, undefined_refs};
use super::kustomize::{Manifests, items};
use super::localize::{localize_addrs, localize_paths};
use super::workload::Workload;
use crate::ports::free_port;

/// One pod of a [`LocalPlan`].
#[derive(Debug, Clone)]
pub struct LocalPod {
    pub workload: Workload,
    pub facts: PodFacts,
    /// containerPort → local port.
    pub ports: BTreeMap<u16, u16>,
    /// mountPath → local directory, longest path first (this pod's mounts).
    pub mounts: Vec<(String, PathBuf)>,
}

impl LocalPod {
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// The local port of the container port `port` (a name or a number).
    pub fn local_port(&self, port: &Value) -> u16 {
        let container_port = self.workload.container_port(port);
        self.ports[&container_port]
    }

    /// `127.0.0.1:<local port>` of a container port.
    pub fn local_addr(&self, port: &Value) -> String {
        format!("127.0.0.1:{}", self.local_port(port))
    }
}

/// What to run for one container: the program named in the manifest
/// (`args[0]`, or `command[0]`), the rest of the arguments, the
/// environment, all with cluster names and paths made local.
#[derive(Debug, Clone)]
pub struct LocalCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl LocalCommand {
    /// Sets each variable of `pairs`, replacing one of the same name: what
    /// the machine provides in place of the cluster's network (like the S3
    /// endpoint), which the manifests leave to the cluster.
    pub fn set_env(&mut self, pairs: &[(String, String)]) {
        for (k, v) in pairs {
            match self.env.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.clone(),
                None => self.env.push((k.clone(), v.clone())),
            }
        }
    }

    /// The value of variable `name`. Panics when it is not set.
    pub fn var(&self, name: &str) -> &str {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{} sets no {name}", self.program))
    }
}

/// A set of pods mapped onto this machine (see the module docs).
#[derive(Debug)]
pub struct LocalPlan {
    pub manifests: Manifests,
    pub root: PathBuf,
    pub pods: Vec<LocalPod>,
    /// Shared volumes (PersistentVolumeClaims) by mount path.
    pub shared: Vec<(String, PathBuf)>,
    /// (host, port) → the local address(es) behind it.
    pub(super) routes: HashMap<(String, u16), String>,
}

impl LocalPlan {
    /// Plans `count(workload)` pods of each workload (0 leaves it out).
    /// Every local path is under `root`.
    pub fn new(manifests: Manifests, root: &Path, count: impl Fn(&Workload) -> u32) -> LocalPlan {
        let mut pods = Vec::new();
        for w in manifests.workloads() {
            for name in w.pod_names(count(&w)) {
                let mut ports = BTreeMap::new();
                for c in w.containers() {
                    for p in items(c, "/ports") {
                        let n = p
                            .pointer("/containerPort")
                            .and_then(Value::as_u64)
                            .expect("containerPort") as u16;
                        ports.insert(n, free_port());
                    }
                }
                pods.push(LocalPod {
                    facts: PodFacts {
                        name,
                        namespace: w.namespace.clone(),
                        ip: "127.0.0.1".to_string(),
                    },
                    workload: w.clone(),
                    ports,
                    mounts: Vec::new(),
                });
            }
        }
        let mut plan = LocalPlan {
            manifests,
            root: root.to_path_buf(),
            pods,
            shared: Vec::new(),
            routes: HashMap::new(),
        };
        plan.plan_volumes();
        plan.plan_routes();
        plan
    }

    /// The pods of workload `name`.
    pub fn pods_of(&self, name: &str) -> Vec<&LocalPod> {
        self.pods
            .iter()
            .filter(|p| p.workload.name == name)
            .collect()
    }

    /// `s` with this pod's mount paths and every address made local.
    /// Panics on an address that routes nowhere.
    pub fn localize(&self, pod: &LocalPod, s: &str) -> String {
        let with_paths = localize_paths(s, &pod.mounts);
        localize_addrs(&with_paths, &pod.ports, &self.routes).unwrap_or_else(|e| {
            panic!(
                "{} ({}): {e}\nin: {s:?}\nknown names: {:?}",
                pod.name(),
                pod.workload.name,
                self.route_names()
            )
        })
    }

    /// A path on a shared volume made local (like `/data/x`).
    pub fn shared_path(&self, path: &str) -> PathBuf {
        let local = localize_paths(path, &self.shared);
        assert_ne!(local, path, "{path} is on no shared volume");
        PathBuf::from(local)
    }

    fn route_names(&self) -> BTreeSet<String> {
        self.routes
            .keys()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect()
    }

    /// The environment of `container` of `pod`, localized.
    pub fn env(&self, pod: &LocalPod, container: &Value) -> Vec<(String, String)> {
        self.manifests
            .container_env(container, &pod.facts)
            .into_iter()
            .map(|(k, v)| {
                let undefined = undefined_refs(&v);
                assert!(
                    undefined.is_empty(),
                    "{}: {k}={v:?} references {undefined:?}, not defined before it \
                     (Kubernetes leaves such a reference unexpanded)",
                    pod.workload.name
                );
                let local = self.localize(pod, &v);
                (k, local)
            })
            .collect()
    }

    /// What to run for `container` of `pod`: `command` + `args` with
    /// `$(VAR)` expanded against the container's environment, localized.
    pub fn command(&self, pod: &LocalPod, container: &Value) -> LocalCommand {
        let raw_env = self.manifests.container_env(container, &pod.facts);
        let vars: HashMap<String, String> = raw_env.into_iter().collect();
        let words: Vec<String> = items(container, "/command")
            .iter()
            .chain(items(container, "/args"))
            .map(|w| {
                let w = expand(w.as_str().expect("a string argument"), &vars);
                let undefined = undefined_refs(&w);
                assert!(
                    undefined.is_empty(),
                    "{}: argument {w:?} references undefined variables {undefined:?}",
                    pod.workload.name
                );
                self.localize(pod, &w)
            })
            .collect();
        let (program, args) = words
            .split_first()
            .unwrap_or_else(|| panic!("{}: no command or args", pod.workload.name));
        LocalCommand {
            program: program.clone(),
            args: args.to_vec(),
            env: self.env(pod, container),
        }
    }
}
