//! The security of the rendered manifests, checked without running
//! anything (`manifests_run.rs` and `manifests_s3.rs` run it):
//!
//! - `every_pod_is_hardened`: every pod runs as the image's non-root user,
//!   with a read-only root filesystem, no privilege escalation, no
//!   capabilities and the RuntimeDefault seccomp profile.
//! - `network_policies_admit_only_the_intended_peers`: by labels, only
//!   executors and the query Jobs reach the drivers' gRPC port, only the
//!   drivers reach etcd's client port and only etcd its peer port;
//!   executors and Jobs take no ingress.
//! - `every_tls_file_comes_from_a_mounted_secret`: every certificate, key,
//!   CA and token file a container is given is a key of a Secret that
//!   deploy/README.md creates, mounted read-only as a whole directory where
//!   the path points; security is on (TLS, mTLS, tokens, etcd TLS); no
//!   Secret is in git; cert-manager issues into the same TLS Secrets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use sluice_tests::manifests::{
    Manifests, OVERLAYS, PodFacts, QUERIES, SECRETS_README, Workload, documented_secrets, items,
    placeholder_secrets, render, repo_root, str_at, string_map,
};

/// The image's user (deploy/docker/Dockerfile's `USER uid:gid`).
fn image_uid() -> u64 {
    let dockerfile = std::fs::read_to_string(repo_root().join("deploy/docker/Dockerfile")).unwrap();
    let user = dockerfile
        .lines()
        .rfind(|l| l.starts_with("USER "))
        .unwrap();
    let uid = user[5..].split(':').next().unwrap().trim();
    uid.parse()
        .unwrap_or_else(|_| panic!("USER is not numeric: {user}"))
}

/// Each overlay with every query's Jobs, as applied together.
fn deployments() -> Vec<(&'static str, Manifests)> {
    let queries = QUERIES
        .iter()
        .fold(Manifests::default(), |m, q| m.with(render(q)));
    OVERLAYS
        .iter()
        .map(|d| (*d, render(d).with(queries.clone())))
        .collect()
}

#[test]
fn every_pod_is_hardened() {
    let uid = image_uid();
    assert_ne!(uid, 0, "the image runs as root");
    for (dir, m) in deployments() {
        for w in m.workloads() {
            let pod = &w.pod_spec["securityContext"];
            let at = format!("{dir}: {} {}", w.kind, w.name);
            assert_eq!(pod["runAsNonRoot"], true, "{at}");
            for key in ["runAsUser", "runAsGroup", "fsGroup"] {
                assert_eq!(pod[key].as_u64(), Some(uid), "{at}: {key}");
            }
            assert_eq!(
                str_at(pod, "/seccompProfile/type"),
                "RuntimeDefault",
                "{at}"
            );
            for c in w.containers() {
                let sc = &c["securityContext"];
                let at = format!("{at} container {}", str_at(c, "/name"));
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{at}");
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{at}");
                assert_ne!(sc["privileged"], true, "{at}");
                assert_eq!(
                    sc["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{at}"
                );
                assert!(sc.pointer("/capabilities/add").is_none(), "{at}");
                assert!(
                    sc.pointer("/runAsUser")
                        .is_none_or(|u| u.as_u64() == Some(uid))
                );
            }
        }
    }
}

/// True when a label selector (`matchLabels`, `matchExpressions`) selects
/// pods with `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let exact = string_map(selector.pointer("/matchLabels"))
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs = items(selector, "/matchExpressions").iter().all(|e| {
        let value = labels.get(str_at(e, "/key"));
        let values: Vec<&str> = items(e, "/values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        match str_at(e, "/operator") {
            "In" => value.is_some_and(|v| values.contains(&v.as_str())),
            "NotIn" => value.is_none_or(|v| !values.contains(&v.as_str())),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            op => panic!("unknown operator {op}"),
        }
    });
    exact && exprs
}

/// Who may reach each container port of `target`: port → the names of the
/// workloads allowed (`*` for any source), or None when no policy selects
/// it (then anything may).
fn ingress(m: &Manifests, target: &Workload) -> Option<BTreeMap<u16, BTreeSet<String>>> {
    let policies: Vec<&Value> = m
        .of_kind("NetworkPolicy")
        .filter(|p| selects(&p["spec"]["podSelector"], &target.labels))
        .filter(|p| items(p, "/spec/policyTypes").iter().any(|t| t == "Ingress"))
        .collect();
    if policies.is_empty() {
        return None;
    }
    let workloads = m.workloads();
    let mut allowed: BTreeMap<u16, BTreeSet<String>> = BTreeMap::new();
    for rule in policies.iter().flat_map(|p| items(p, "/spec/ingress")) {
        let sources: BTreeSet<String> = if rule.pointer("/from").is_none() {
            ["*".to_string()].into()
        } else {
            items(rule, "/from")
                .iter()
                .flat_map(|peer| {
                    assert!(
                        peer.pointer("/ipBlock").is_none()
                            && peer.pointer("/namespaceSelector").is_none(),
                        "{}: only pod selectors: {peer}",
                        target.name
                    );
                    workloads
                        .iter()
                        .filter(|w| selects(&peer["podSelector"], &w.labels))
                        .map(|w| w.name.clone())
                })
                .collect()
        };
        for port in items(rule, "/ports") {
            allowed
                .entry(target.container_port(&port["port"]))
                .or_default()
                .extend(sources.iter().cloned());
        }
    }
    Some(allowed)
}

#[test]
fn network_policies_admit_only_the_intended_peers() {
    for (dir, m) in deployments() {
        let names = |f: &dyn Fn(&Workload) -> bool| -> BTreeSet<String> {
            m.workloads()
                .into_iter()
                .filter(|w| f(w))
                .map(|w| w.name)
                .collect()
        };
        let jobs = names(&|w| w.kind == "Job");
        assert_eq!(jobs.len(), 6, "{dir}: the Jobs of three queries");
        let mut clients = jobs.clone();
        clients.insert("sluice-executor".into());
        // A standby watches the leader's process on its gRPC port.
        clients.insert("sluice-driver".into());
        let any: BTreeSet<String> = ["*".to_string()].into();

        let driver = m.workload("sluice-driver");
        let port = |w: &Workload, name: &str| w.container_port(&Value::from(name));
        let got = ingress(&m, &driver).unwrap_or_else(|| panic!("{dir}: no policy for drivers"));
        let want = BTreeMap::from([
            (port(&driver, "grpc"), clients),
            (port(&driver, "http"), any.clone()),
        ]);
        assert_eq!(got, want, "{dir}: who reaches the drivers");

        let etcd = m.workload("etcd");
        let got = ingress(&m, &etcd).unwrap_or_else(|| panic!("{dir}: no policy for etcd"));
        let want = BTreeMap::from([
            (port(&etcd, "client"), names(&|w| w.name == "sluice-driver")),
            (port(&etcd, "peer"), names(&|w| w.name == "etcd")),
            (port(&etcd, "metrics"), any.clone()),
        ]);
        assert_eq!(got, want, "{dir}: who reaches etcd");

        for name in jobs.iter().chain(["sluice-executor".to_string()].iter()) {
            let w = m.workload(name);
            assert_eq!(
                ingress(&m, &w),
                Some(BTreeMap::new()),
                "{dir}: {name} takes no ingress"
            );
        }
    }
}

/// Variables that name a certificate, key, CA or token file.
const FILE_VARS: &[&str] = &[
    "SLUICE_TLS_CERT",
    "SLUICE_TLS_KEY",
    "SLUICE_TLS_CA",
    "SLUICE_CLIENT_CA",
    "SLUICE_AUTH_TOKENS",
    "SLUICE_ETCD_CA",
    "SLUICE_ETCD_CERT",
    "SLUICE_ETCD_KEY",
    "SLUICE_ETCD_PASSWORD_FILE",
    "ETCD_CERT_FILE",
    "ETCD_KEY_FILE",
    "ETCD_TRUSTED_CA_FILE",
    "ETCD_PEER_CERT_FILE",
    "ETCD_PEER_KEY_FILE",
    "ETCD_PEER_TRUSTED_CA_FILE",
];

/// What each workload must set (all of them file variables but the last).
const REQUIRED: &[(&str, &[&str])] = &[
    (
        "sluice-driver",
        &[
            "SLUICE_TLS_CERT",
            "SLUICE_TLS_KEY",
            "SLUICE_CLIENT_CA",
            "SLUICE_AUTH_TOKENS",
            "SLUICE_ETCD_CA",
            "SLUICE_ETCD_CERT",
            "SLUICE_ETCD_KEY",
        ],
    ),
    (
        "sluice-executor",
        &["SLUICE_TLS_CA", "SLUICE_TLS_CERT", "SLUICE_TLS_KEY"],
    ),
    (
        "etcd",
        &[
            "ETCD_CERT_FILE",
            "ETCD_KEY_FILE",
            "ETCD_TRUSTED_CA_FILE",
            "ETCD_PEER_CERT_FILE",
            "ETCD_PEER_KEY_FILE",
            "ETCD_PEER_TRUSTED_CA_FILE",
        ],
    ),
];

#[test]
fn every_tls_file_comes_from_a_mounted_secret() {
    let (_, documented) = documented_secrets();
    let keys_of = |name: &str| {
        documented
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("Secret {name} is not created in {SECRETS_README}"))
    };
    let facts = PodFacts {
        name: "etcd-0".into(),
        namespace: "sluice".into(),
        ip: "10.1.2.3".into(),
    };
    for (dir, m) in deployments() {
        assert_eq!(m.of_kind("Secret").count(), 0, "{dir}: a Secret in git");
        let with = m.clone().with(placeholder_secrets());
        for w in m.workloads() {
            for c in w.containers() {
                let at = format!("{dir}: {} container {}", w.name, str_at(c, "/name"));
                let env: BTreeMap<String, String> =
                    with.container_env(c, &facts).into_iter().collect();
                let mounts = items(c, "/volumeMounts");
                for var in FILE_VARS.iter().filter(|v| env.contains_key(**v)) {
                    let path = Path::new(&env[*var]);
                    let (parent, key) = (
                        path.parent().unwrap().to_str().unwrap(),
                        path.file_name().unwrap().to_str().unwrap(),
                    );
                    let mount = mounts
                        .iter()
                        .find(|m| str_at(m, "/mountPath") == parent)
                        .unwrap_or_else(|| {
                            panic!("{at}: {var}={path:?}: nothing is mounted at {parent}")
                        });
                    assert_eq!(mount["readOnly"], true, "{at}: {parent} read-only");
                    assert!(
                        mount.pointer("/subPath").is_none(),
                        "{at}: {parent}: a subPath is never updated"
                    );
                    let vol = items(&w.pod_spec, "/volumes")
                        .iter()
                        .find(|v| v["name"] == mount["name"])
                        .unwrap();
                    let secret = str_at(vol, "/secret/secretName");
                    assert!(
                        !secret.is_empty(),
                        "{at}: {parent} is not a Secret volume: {vol}"
                    );
                    assert!(
                        keys_of(secret).has_key(key),
                        "{at}: {var}: Secret {secret} has no key {key}"
                    );
                }
                if let Some(token) = items(c, "/env")
                    .iter()
                    .find(|e| e["name"] == "SLUICE_TOKEN")
                {
                    let r = &token["valueFrom"]["secretKeyRef"];
                    assert!(
                        keys_of(str_at(r, "/name")).has_key(str_at(r, "/key")),
                        "{at}: {r}"
                    );
                }
                let required = REQUIRED
                    .iter()
                    .find(|(n, _)| *n == w.name)
                    .map_or(&[][..], |r| r.1);
                for var in required {
                    assert!(env.contains_key(*var), "{at}: {var} is not set");
                }
                if w.kind == "Job" {
                    assert!(
                        env.contains_key("SLUICE_TLS_CA") && env.contains_key("SLUICE_TOKEN"),
                        "{at}"
                    );
                }
                if w.name == "sluice-driver" {
                    assert!(
                        env["SLUICE_ETCD"]
                            .split(',')
                            .all(|e| e.starts_with("https://")),
                        "{at}"
                    );
                }
                if w.name == "etcd" {
                    assert_eq!(env["ETCD_CLIENT_CERT_AUTH"], "true", "{at}");
                    assert_eq!(env["ETCD_PEER_CLIENT_CERT_AUTH"], "true", "{at}");
                    assert!(
                        env["ETCD_LISTEN_CLIENT_URLS"].starts_with("https://"),
                        "{at}"
                    );
                    assert!(
                        env["ETCD_INITIAL_CLUSTER"]
                            .split(',')
                            .all(|m| m.contains("=https://")),
                        "{at}"
                    );
                    // The probes stay on the plaintext metrics port.
                    let metrics = w.container_port(&Value::from("metrics"));
                    assert!(
                        env["ETCD_LISTEN_METRICS_URLS"].starts_with("http://"),
                        "{at}"
                    );
                    for p in ["readinessProbe", "livenessProbe"] {
                        assert_eq!(
                            w.container_port(&c[p]["httpGet"]["port"]),
                            metrics,
                            "{at}: {p}"
                        );
                    }
                }
            }
        }
    }

    // cert-manager issues into exactly the README's TLS Secrets.
    let text =
        std::fs::read_to_string(repo_root().join("deploy/k8s/cert-manager/certificates.yaml"))
            .unwrap();
    let issued: BTreeSet<String> = Manifests::parse(&text)
        .of_kind("Certificate")
        .map(|c| str_at(c, "/spec/secretName").to_string())
        .filter(|s| s != "sluice-ca")
        .collect();
    let tls: BTreeSet<String> = documented
        .iter()
        .filter(|s| s.has_key("tls.crt"))
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        issued, tls,
        "cert-manager's Certificates vs {SECRETS_README}"
    );
}
