//! Routes of a [`LocalPlan`]: the DNS names of Services and StatefulSet
//! pods, and the local addresses of the planned pods behind them.

use std::collections::HashMap;

use serde_json::Value;

use super::kustomize::{items, str_at, string_map};
use super::plan::{LocalPlan, LocalPod};

impl LocalPlan {
    /// DNS names → local addresses: a Service's names route to every
    /// planned pod it selects (on the container port its `targetPort`
    /// names), a StatefulSet pod's names to that pod.
    pub(super) fn plan_routes(&mut self) {
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
