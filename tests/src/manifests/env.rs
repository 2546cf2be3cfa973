//! Container environments: [`Manifests::container_env`] builds one the way
//! the kubelet does (ConfigMaps, Secrets, the downward API through [`PodFacts`],
//! `$(VAR)` [`expand`]ed), [`undefined_refs`] finds what it left
//! unexpanded, and [`help_env_vars`] reads the variables a binary's
//! `--help` says it takes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::kustomize::{Manifests, items, str_at};

impl Manifests {
    /// The names of a container's environment variables, as written: the
    /// keys of its `envFrom` ConfigMaps and of the Secrets the manifests
    /// hold (with their prefix), and its `env`.
    pub fn container_env_names(&self, container: &Value) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for from in items(container, "/envFrom") {
            let prefix = str_at(from, "/prefix");
            // A Secret users create has keys unknown here.
            for key in self.env_source(from).unwrap_or_default().keys() {
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
            // A missing optional Secret adds nothing, as in the kubelet; a
            // missing required one would keep the pod from starting.
            let data = self.env_source(from).unwrap_or_else(|| {
                assert!(
                    from["secretRef"]["optional"] == true,
                    "envFrom: no Secret for {from}, and it is not optional"
                );
                BTreeMap::new()
            });
            for (k, v) in data {
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
            } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
                let key = str_at(r, "/key");
                match self
                    .secret(str_at(r, "/name"))
                    .and_then(|s| s.get(key).cloned())
                {
                    Some(v) => v,
                    // The kubelet leaves the variable out.
                    None if r["optional"] == true => continue,
                    None => panic!("{name}: no Secret with key {key} for {r}, and not optional"),
                }
            } else if e.pointer("/valueFrom").is_some() {
                panic!("unsupported valueFrom for {name}: {e}")
            } else {
                String::new()
            };
            set(&mut env, name, value);
        }
        env
    }

    /// The variables of one `envFrom` entry: a ConfigMap's data, or a
    /// Secret's; None for a Secret that is not in the manifests.
    fn env_source(&self, from: &Value) -> Option<BTreeMap<String, String>> {
        if let Some(cm) = from.pointer("/configMapRef/name").and_then(Value::as_str) {
            return Some(self.config_map(cm));
        }
        let name = from
            .pointer("/secretRef/name")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("envFrom other than configMapRef or secretRef: {from}"));
        self.secret(name)
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
