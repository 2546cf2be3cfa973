//! [`Workload`]: a Deployment, StatefulSet or Job of the [`Manifests`],
//! with its pod template: its containers and their ports, the labels a
//! Service selects, and the names its pods get.

use std::collections::BTreeMap;

use serde_json::Value;

use super::kustomize::{Manifests, items, str_at, string_map};

impl Manifests {
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
