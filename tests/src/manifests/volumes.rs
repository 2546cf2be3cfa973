//! Volumes of a [`LocalPlan`]: PersistentVolumeClaims, claim templates,
//! emptyDirs, ConfigMaps and Secrets, each a directory under the plan's
//! root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

use super::kustomize::{items, str_at};
use super::localize::localize_paths;
use super::plan::LocalPlan;

impl LocalPlan {
    /// Volumes: a PVC is one directory per claim, shared by every pod and
    /// mounted at one path everywhere; a claim template is one directory
    /// per pod; emptyDir is per pod; a ConfigMap becomes files (their
    /// paths localized too, since they name paths on the shared volumes).
    pub(super) fn plan_volumes(&mut self) {
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
                        // A Secret: its keys as files, as the kubelet
                        // writes them (a test adds the Secret).
                        Some(v) if v.pointer("/secret").is_some() => {
                            let name = str_at(v, "/secret/secretName");
                            let data = self.manifests.secret(name).unwrap_or_else(|| {
                                assert!(
                                    v["secret"]["optional"] == true,
                                    "{}: no Secret {name} for volume {vol}, and it is not optional",
                                    w.name
                                );
                                Default::default()
                            });
                            std::fs::create_dir_all(&pod_dir).expect("create secret dir");
                            for (key, text) in data {
                                std::fs::write(pod_dir.join(key), text).expect("write secret file");
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
}
