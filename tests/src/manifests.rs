//! The Kubernetes manifests under `deploy/`, read the way a cluster would
//! read them, so that a test can run the real binaries with exactly the
//! settings the manifests give them.
//!
//! - [`render`] runs `kubectl kustomize` and [`Manifests`] holds the objects.
//! - [`Manifests::container_env`] resolves a container's environment like
//!   the kubelet: `envFrom` ConfigMaps, then `env` in order, with the
//!   downward API and `$(VAR)` references to variables defined before.
//! - [`LocalPlan`] maps a set of pods onto one machine: every container
//!   port gets a free local port, Service and pod DNS names become the
//!   local addresses of the pods behind them (the way kube-proxy and
//!   cluster DNS would route), volume mount paths become directories under
//!   a temporary root (a PersistentVolumeClaim is one directory shared by
//!   every pod that mounts it), ConfigMap volumes become files, and the pod
//!   IP is 127.0.0.1. An address that maps to nothing is a test failure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

use crate::ports::free_port;

/// The repository root (the parent of `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `$KUBECTL`, else `kubectl` on `PATH`. Panics with how to install it.
pub fn kubectl() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECTL") {
        return PathBuf::from(k);
    }
    find_on_path("kubectl").unwrap_or_else(|| {
        panic!(
            "kubectl not found on PATH: it renders deploy/ with `kubectl kustomize` (no \
             cluster needed). Install it: https://kubernetes.io/docs/tasks/tools/ , e.g. \
             `curl -fsSLO https://dl.k8s.io/release/v1.32.4/bin/linux/amd64/kubectl && \
             sudo install -m 0755 kubectl /usr/local/bin/kubectl`, or set KUBECTL"
        )
    })
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

    /// The Deployments, StatefulSets and Jobs.
    pub fn workloads(&self) -> Vec<Workload> {
        self.objects
            .iter()
            .filter_map(|o| {
                let kind = str_at(o, "/kind");
                if !matches!(kind, "Deployment" | "StatefulSet" | "Job") {
                    return None;
                }
                let template = o.pointer("/spec/template").cloned().unwrap_or(Value::Null);
                Some(Workload {
                    kind: kind.to_string(),
                    name: str_at(o, "/metadata/name").to_string(),
                    namespace: str_at(o, "/metadata/namespace").to_string(),
                    replicas: o
                        .pointer("/spec/replicas")
                        .and_then(Value::as_u64)
                        .map(|r| r as u32)
                        .unwrap_or(1),
                    service_name: o
                        .pointer("/spec/serviceName")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    labels: string_map(template.pointer("/metadata/labels")),
                    annotations: string_map(template.pointer("/metadata/annotations")),
                    pod_spec: template.pointer("/spec").cloned().unwrap_or(Value::Null),
                    claim_templates: items(o, "/spec/volumeClaimTemplates")
                        .iter()
                        .map(|t| str_at(t, "/metadata/name").to_string())
                        .collect(),
                })
            })
            .collect()
    }

    /// The workload named `name`. Panics when it is missing.
    pub fn workload(&self, name: &str) -> Workload {
        self.workloads()
            .into_iter()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("no Deployment, StatefulSet or Job named {name:?}"))
    }

    /// The names of a container's environment variables, as written: the
    /// keys of its `envFrom` ConfigMaps (with their prefix) and its `env`.
    pub fn container_env_names(&self, container: &Value) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for from in items(container, "/envFrom") {
            let prefix = str_at(from, "/prefix");
            let cm = str_at(from, "/configMapRef/name");
            assert!(
                !cm.is_empty(),
                "envFrom other than a configMapRef is not supported here: {from}"
            );
            for key in self.config_map(cm).keys() {
                names.insert(format!("{prefix}{key}"));
            }
        }
        for e in items(container, "/env") {
            names.insert(str_at(e, "/name").to_string());
        }
        names
    }

    /// A container's environment as the kubelet builds it, in order:
    /// `envFrom` first, then `env`, each `$(VAR)` expanded against the
    /// variables defined before it (an undefined reference stays as is).
    pub fn container_env(&self, container: &Value, pod: &PodFacts) -> Vec<(String, String)> {
        fn set(env: &mut Vec<(String, String)>, k: String, v: String) {
            match env.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => env.push((k, v)),
            }
        }
        let mut env: Vec<(String, String)> = Vec::new();
        for from in items(container, "/envFrom") {
            let prefix = str_at(from, "/prefix");
            for (k, v) in self.config_map(str_at(from, "/configMapRef/name")) {
                set(&mut env, format!("{prefix}{k}"), v);
            }
        }
        for e in items(container, "/env") {
            let name = str_at(e, "/name").to_string();
            let value = if let Some(v) = e.pointer("/value").and_then(Value::as_str) {
                let vars: HashMap<String, String> = env.iter().cloned().collect();
                expand(v, &vars)
            } else if let Some(field) = e.pointer("/valueFrom/fieldRef/fieldPath") {
                pod.field(field.as_str().unwrap_or(""))
            } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
                let cm = self.config_map(str_at(r, "/name"));
                let key = str_at(r, "/key");
                cm.get(key)
                    .unwrap_or_else(|| panic!("ConfigMap {r} has no key {key}"))
                    .clone()
            } else if e.pointer("/valueFrom").is_some() {
                panic!("unsupported valueFrom for {name}: {e}")
            } else {
                String::new()
            };
            set(&mut env, name, value);
        }
        env
    }
}

/// The downward API facts of one local pod.
#[derive(Debug, Clone)]
pub struct PodFacts {
    pub name: String,
    pub namespace: String,
    pub ip: String,
}

impl PodFacts {
    /// The value of a `fieldRef`.
    pub fn field(&self, path: &str) -> String {
        match path {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "status.podIP" | "status.hostIP" => self.ip.clone(),
            "spec.nodeName" => "localhost".to_string(),
            other => panic!("unsupported fieldRef {other}"),
        }
    }
}

/// Kubernetes' `$(VAR)` expansion: `$(NAME)` becomes the value of a defined
/// variable, `$$` becomes `$`, anything else stays as written.
pub fn expand(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&rest[i..i + 2 + end + 1]),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A Deployment, StatefulSet or Job, with its pod template.
#[derive(Debug, Clone)]
pub struct Workload {
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub replicas: u32,
    pub service_name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub pod_spec: Value,
    pub claim_templates: Vec<String>,
}

impl Workload {
    /// Init containers, then containers.
    pub fn containers(&self) -> Vec<&Value> {
        items(&self.pod_spec, "/initContainers")
            .iter()
            .chain(items(&self.pod_spec, "/containers"))
            .collect()
    }

    /// The container named `name`. Panics when it is missing.
    pub fn container(&self, name: &str) -> &Value {
        self.containers()
            .into_iter()
            .find(|c| str_at(c, "/name") == name)
            .unwrap_or_else(|| panic!("{} {} has no container {name:?}", self.kind, self.name))
    }

    /// The single container of the pod. Panics unless there is one.
    pub fn only_container(&self) -> &Value {
        let all = self.containers();
        assert_eq!(
            all.len(),
            1,
            "{} {} should have one container",
            self.kind,
            self.name
        );
        all[0]
    }

    /// `containerPort` of the port `port` (a name or a number) of any
    /// container. Panics when no container declares it.
    pub fn container_port(&self, port: &Value) -> u16 {
        for c in self.containers() {
            for p in items(c, "/ports") {
                let number = p.pointer("/containerPort").and_then(Value::as_u64);
                let matches = match port {
                    Value::String(name) => str_at(p, "/name") == name,
                    Value::Number(n) => number == n.as_u64(),
                    _ => false,
                };
                if matches {
                    return number.expect("containerPort") as u16;
                }
            }
        }
        panic!(
            "{} {}: no container declares port {port}",
            self.kind, self.name
        )
    }

    /// True when the pod template carries every label of `selector`.
    pub fn matches(&self, selector: &BTreeMap<String, String>) -> bool {
        !selector.is_empty()
            && selector
                .iter()
                .all(|(k, v)| self.labels.get(k).is_some_and(|l| l == v))
    }

    /// The names its pods get here: `<sts>-<i>` for a StatefulSet (as in a
    /// cluster, where the DNS names depend on it), `<name>-local-<i>` else.
    pub fn pod_names(&self, count: u32) -> Vec<String> {
        (0..count)
            .map(|i| match self.kind.as_str() {
                "StatefulSet" => format!("{}-{i}", self.name),
                _ => format!("{}-local-{i}", self.name),
            })
            .collect()
    }
}

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

/// A set of pods mapped onto this machine (see the module docs).
#[derive(Debug)]
pub struct LocalPlan {
    pub manifests: Manifests,
    pub root: PathBuf,
    pub pods: Vec<LocalPod>,
    /// Shared volumes (PersistentVolumeClaims) by mount path.
    pub shared: Vec<(String, PathBuf)>,
    /// (host, port) → the local address(es) behind it.
    routes: HashMap<(String, u16), String>,
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

    /// Volumes: a PVC is one directory per claim, shared by every pod and
    /// mounted at one path everywhere; a claim template is one directory
    /// per pod; emptyDir is per pod; a ConfigMap becomes files (their
    /// paths localized too, since they name paths on the shared volumes).
    fn plan_volumes(&mut self) {
        let mut shared: BTreeMap<String, (String, PathBuf)> = BTreeMap::new();
        for pod in &self.pods {
            let w = &pod.workload;
            for c in w.containers() {
                for m in items(c, "/volumeMounts") {
                    let vol = str_at(m, "/name");
                    let mount = str_at(m, "/mountPath").to_string();
                    let spec = items(&w.pod_spec, "/volumes")
                        .iter()
                        .find(|v| str_at(v, "/name") == vol);
                    if let Some(claim) = spec
                        .and_then(|v| v.pointer("/persistentVolumeClaim/claimName"))
                        .and_then(Value::as_str)
                    {
                        let dir = self.root.join("pvc").join(claim);
                        match shared.get(claim) {
                            Some((path, _)) => assert_eq!(
                                path, &mount,
                                "PVC {claim} is mounted at {path} in one pod and at {mount} in {}",
                                w.name
                            ),
                            None => {
                                shared.insert(claim.to_string(), (mount, dir));
                            }
                        }
                    }
                }
            }
        }
        let mut by_path: Vec<(String, PathBuf)> = shared.into_values().collect();
        let paths: BTreeSet<&String> = by_path.iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths.len(),
            by_path.len(),
            "two PVCs at one mount path: {by_path:?}"
        );
        by_path.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (_, dir) in &by_path {
            std::fs::create_dir_all(dir).expect("create PVC dir");
        }
        self.shared = by_path;

        let mut all_mounts = Vec::new();
        for pod in &self.pods {
            let w = &pod.workload;
            let mut mounts: Vec<(String, PathBuf)> = Vec::new();
            for c in w.containers() {
                for m in items(c, "/volumeMounts") {
                    let vol = str_at(m, "/name");
                    let mount = str_at(m, "/mountPath").to_string();
                    if mounts.iter().any(|(p, _)| *p == mount) {
                        continue;
                    }
                    let spec = items(&w.pod_spec, "/volumes")
                        .iter()
                        .find(|v| str_at(v, "/name") == vol);
                    let pod_dir = self.root.join("pods").join(pod.name()).join(vol);
                    let dir = match spec {
                        Some(v) if v.pointer("/persistentVolumeClaim").is_some() => {
                            let claim = str_at(v, "/persistentVolumeClaim/claimName");
                            self.root.join("pvc").join(claim)
                        }
                        Some(v) if v.pointer("/emptyDir").is_some() => pod_dir,
                        Some(v) if v.pointer("/configMap").is_some() => {
                            let data = self.manifests.config_map(str_at(v, "/configMap/name"));
                            std::fs::create_dir_all(&pod_dir).expect("create configMap dir");
                            for (key, text) in data {
                                let text = localize_paths(&text, &self.shared);
                                std::fs::write(pod_dir.join(key), text)
                                    .expect("write configMap file");
                            }
                            pod_dir
                        }
                        None if w.claim_templates.iter().any(|t| t == vol) => pod_dir,
                        other => panic!(
                            "{}: unsupported volume {vol} ({other:?}) mounted at {mount}",
                            w.name
                        ),
                    };
                    std::fs::create_dir_all(&dir).expect("create volume dir");
                    mounts.push((mount, dir));
                }
            }
            mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
            all_mounts.push(mounts);
        }
        for (pod, mounts) in self.pods.iter_mut().zip(all_mounts) {
            pod.mounts = mounts;
        }
    }

    /// DNS names → local addresses: a Service's names route to every
    /// planned pod it selects (on the container port its `targetPort`
    /// names), a StatefulSet pod's names to that pod.
    fn plan_routes(&mut self) {
        let mut routes: HashMap<(String, u16), Vec<String>> = HashMap::new();
        for svc in self.manifests.of_kind("Service") {
            let name = str_at(svc, "/metadata/name");
            let ns = str_at(svc, "/metadata/namespace");
            let selector = string_map(svc.pointer("/spec/selector"));
            let backends: Vec<&LocalPod> = self
                .pods
                .iter()
                .filter(|p| p.workload.matches(&selector))
                .collect();
            for port in items(svc, "/spec/ports") {
                let number = port
                    .pointer("/port")
                    .and_then(Value::as_u64)
                    .expect("Service port") as u16;
                let target = port
                    .pointer("/targetPort")
                    .cloned()
                    .unwrap_or(json_u16(number));
                let addrs: Vec<String> = backends.iter().map(|p| p.local_addr(&target)).collect();
                for host in dns_names(name, ns) {
                    routes
                        .entry((host, number))
                        .or_default()
                        .extend(addrs.iter().cloned());
                }
            }
            // Pods behind a headless Service that a StatefulSet names.
            for pod in &backends {
                if pod.workload.service_name.as_deref() != Some(name) {
                    continue;
                }
                for (&container_port, &local) in &pod.ports {
                    for host in dns_names(&format!("{}.{name}", pod.name()), ns) {
                        routes
                            .entry((host, container_port))
                            .or_default()
                            .push(format!("127.0.0.1:{local}"));
                    }
                }
            }
        }
        self.routes = routes.into_iter().map(|(k, v)| (k, v.join(","))).collect();
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

fn json_u16(n: u16) -> Value {
    Value::from(n)
}

/// The names a Service (or `<pod>.<service>`) answers to from a pod in
/// the same namespace.
pub fn dns_names(name: &str, namespace: &str) -> Vec<String> {
    vec![
        name.to_string(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
}

/// Replaces mount paths, in one pass, where they start a path: at the
/// start, after whitespace, `=`, a quote, `,` or `file://`, and followed by
/// `/`, the end, whitespace or a quote. At one position the longest mount
/// path wins; a replacement is never rewritten again.
pub fn localize_paths(s: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut sorted: Vec<&(String, PathBuf)> = mounts.iter().collect();
    sorted.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        let before_ok = i == 0
            || s[..i].ends_with("file://")
            || s[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_whitespace() || matches!(c, '=' | '"' | '\'' | ','));
        if before_ok {
            for (mount, dir) in &sorted {
                if !s[i..].starts_with(mount.as_str()) {
                    continue;
                }
                let end = i + mount.len();
                let after_ok = end == s.len()
                    || s[end..]
                        .chars()
                        .next()
                        .is_some_and(|c| c == '/' || c.is_whitespace() || matches!(c, '"' | '\''));
                if after_ok {
                    out.push_str(dir.to_str().expect("utf-8 temp path"));
                    i = end;
                    continue 'scan;
                }
            }
        }
        let c = s[i..].chars().next().expect("a char");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The `$(NAME)` references left in `s` after [`expand`] whose NAME looks
/// like a variable (`[A-Za-z_][A-Za-z0-9_]*`): variables not defined before
/// the place that uses them. (Shell like `$(date +%s)` is not one, and
/// Kubernetes leaves it alone.)
pub fn undefined_refs(s: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("$(") {
        let body = &rest[i + 2..];
        if let Some(end) = body.find(')') {
            let name = &body[..end];
            let mut chars = name.chars();
            let var_like = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if var_like {
                refs.push(name.to_string());
            }
        }
        rest = body;
    }
    refs
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '.' || c == '-'
}

/// Replaces every `host:port` in `s`: a local listen address
/// (`0.0.0.0`, `127.0.0.1`, `localhost`) on one of `own` ports becomes
/// `127.0.0.1:<local port>`; a name in `routes` becomes its local
/// address(es). Any other `host:port` is an error.
pub fn localize_addrs(
    s: &str,
    own: &BTreeMap<u16, u16>,
    routes: &HashMap<(String, u16), String>,
) -> Result<String, String> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut k = 0;
    while k < chars.len() {
        let (start, c) = chars[k];
        let starts_token = is_host_char(c) && (k == 0 || !is_host_char(chars[k - 1].1));
        if !starts_token {
            k += 1;
            continue;
        }
        let mut j = k;
        while j < chars.len() && is_host_char(chars[j].1) {
            j += 1;
        }
        let host_end = chars.get(j).map_or(s.len(), |x| x.0);
        let host = &s[start..host_end];
        let colon = chars.get(j).is_some_and(|x| x.1 == ':');
        let mut d = j + 1;
        while colon && d < chars.len() && chars[d].1.is_ascii_digit() {
            d += 1;
        }
        let port_end = chars.get(d).map_or(s.len(), |x| x.0);
        let digits = colon && d > j + 1;
        // `host:port` not followed by more of a name.
        let whole = digits && chars.get(d).is_none_or(|x| !is_host_char(x.1));
        let numeric_host = host.chars().all(|c| c.is_ascii_digit());
        if !whole || numeric_host {
            k = j.max(k + 1);
            continue;
        }
        let port: u16 = s[host_end + 1..port_end]
            .parse()
            .map_err(|_| format!("bad port in {}", &s[start..port_end]))?;
        let replacement = if matches!(host, "0.0.0.0" | "127.0.0.1" | "localhost") {
            own.get(&port)
                .map(|local| format!("127.0.0.1:{local}"))
                .ok_or_else(|| format!("{host}:{port} is not a port this container declares"))?
        } else {
            routes
                .get(&(host.to_string(), port))
                .cloned()
                .ok_or_else(|| {
                    format!("{host}:{port} is no Service or pod name of the planned pods")
                })?
        };
        if replacement.is_empty() {
            return Err(format!("{host}:{port} selects no planned pod"));
        }
        out.push_str(&s[copied..start]);
        out.push_str(&replacement);
        copied = port_end;
        k = d;
    }
    out.push_str(&s[copied..]);
    Ok(out)
}

/// The `SLUICE_*`-style environment variables a binary's `--help` lists
/// (`[env: NAME=...]`).
pub fn help_env_vars(help: &str) -> BTreeSet<String> {
    help.match_indices("[env: ")
        .filter_map(|(i, m)| {
            let rest = &help[i + m.len()..];
            let end = rest.find(['=', ']'])?;
            Some(rest[..end].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_kubernetes() {
        let vars: HashMap<String, String> = [("A", "1"), ("POD_IP", "10.0.0.7")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(expand("$(POD_IP):7070", &vars), "10.0.0.7:7070");
        assert_eq!(expand("$(B)-$(A)", &vars), "$(B)-1");
        assert_eq!(expand("$$(A) $ x$", &vars), "$(A) $ x$");
        assert_eq!(expand("$(A", &vars), "$(A");
    }

    #[test]
    fn addresses_map_or_fail() {
        let own: BTreeMap<u16, u16> = [(7070, 20001)].into_iter().collect();
        let routes: HashMap<(String, u16), String> = [(
            ("etcd-0.etcd".to_string(), 2379),
            "127.0.0.1:30000".to_string(),
        )]
        .into_iter()
        .collect();
        assert_eq!(
            localize_addrs("http://etcd-0.etcd:2379,x=0.0.0.0:7070", &own, &routes).unwrap(),
            "http://127.0.0.1:30000,x=127.0.0.1:20001"
        );
        assert_eq!(
            localize_addrs("at 12:30, etcd-0=http", &own, &routes).unwrap(),
            "at 12:30, etcd-0=http"
        );
        assert!(localize_addrs("sluice-driver:7070", &own, &routes).is_err());
        assert!(localize_addrs("0.0.0.0:9999", &own, &routes).is_err());
    }

    #[test]
    fn paths_map_at_path_boundaries() {
        let mounts = vec![("/data".to_string(), PathBuf::from("/tmp/x/pvc"))];
        assert_eq!(
            localize_paths("/data/checkpoints", &mounts),
            "/tmp/x/pvc/checkpoints"
        );
        assert_eq!(
            localize_paths("path: /data/sinks/a\nfile:///data", &mounts),
            "path: /tmp/x/pvc/sinks/a\nfile:///tmp/x/pvc"
        );
        assert_eq!(
            localize_paths("/database /x/data", &mounts),
            "/database /x/data"
        );
        // A replacement under /tmp is not rewritten by a /tmp mount.
        let nested = vec![
            ("/tmp".to_string(), PathBuf::from("/tmp/x/pod/tmp")),
            ("/data".to_string(), PathBuf::from("/tmp/x/pvc")),
        ];
        assert_eq!(
            localize_paths("/data/c /tmp", &nested),
            "/tmp/x/pvc/c /tmp/x/pod/tmp"
        );
    }

    #[test]
    fn undefined_references_are_variable_names_only() {
        assert_eq!(
            undefined_refs("$(POD_IP):1 $(date +%s) $(( 1 + 2 ))"),
            vec!["POD_IP"]
        );
        assert!(undefined_refs("deadline=$(( $(date +%s) + T ))").is_empty());
    }

    #[test]
    fn help_lists_env_vars() {
        let help =
            "  --listen <L>  gRPC [env: SLUICE_LISTEN=] [default: x]\n  --id [env: SLUICE_ID=abc]";
        let vars = help_env_vars(help);
        assert!(vars.contains("SLUICE_LISTEN") && vars.contains("SLUICE_ID"));
        assert_eq!(vars.len(), 2);
    }
}
