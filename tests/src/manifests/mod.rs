//! The Kubernetes manifests under `deploy/`, read the way a cluster would
//! read them, so that a test can run the real binaries with exactly the
//! settings the manifests give them.
//!
//! - [`render`] runs `kubectl kustomize` and [`Manifests`] holds the objects
//!   (`kustomize`); [`Workload`] is one Deployment, StatefulSet or Job and
//!   its pod template (`workload`).
//! - [`Manifests::container_env`] resolves a container's environment like
//!   the kubelet: `envFrom` ConfigMaps and Secrets, then `env` in order,
//!   with the downward API and `$(VAR)` references to variables defined
//!   before (`env`, which also reads the variables a binary's `--help`
//!   lists). A Secret that users create is not rendered: a test adds it.
//! - [`LocalPlan`] maps a set of pods onto one machine: every container
//!   port gets a free local port, Service and pod DNS names become the
//!   local addresses of the pods behind them (the way kube-proxy and
//!   cluster DNS would route), volume mount paths become directories under
//!   a temporary root (a PersistentVolumeClaim is one directory shared by
//!   every pod that mounts it), ConfigMap volumes become files, and the pod
//!   IP is 127.0.0.1. An address that maps to nothing is a test failure.
//!   A Secret volume becomes files too, from a Secret the test adds.
//!   `plan` holds the pods and what to run, `volumes` and `routes` build
//!   the mounts and the DNS names, `localize` rewrites paths and addresses.
//! - [`readme_secrets`] makes the Secrets the way deploy/README.md says:
//!   the real `sluice certs init`, then one Secret per documented
//!   `kubectl create secret` (`secrets`).
//! - `run` starts the planned pods as processes of a
//!   [`Cluster`](crate::Cluster), runs a Job's script, and probes a pod.

mod env;
mod kustomize;
mod localize;
mod plan;
mod routes;
mod run;
mod secrets;
mod volumes;
mod workload;

pub use env::{PodFacts, expand, help_env_vars, undefined_refs};
pub use kustomize::{
    BASE, CHAOS_QUERY, DEV, EXAMPLE, EXAMPLE_S3, Manifests, OVERLAYS, PROD, QUERIES, S3_OVERLAY,
    find_on_path, items, kubectl, render, repo_root, str_at, string_map,
};
pub use localize::{localize_addrs, localize_paths};
pub use plan::{LocalCommand, LocalPlan, LocalPod};
pub use routes::dns_names;
pub use run::{Running, probe, run_job, start, start_etcd, submit_and_verify, wait_one_ready};
pub use secrets::{
    SECRETS_README, SecretCommand, documented_secrets, placeholder_secrets, readme_secrets,
};
pub use workload::Workload;
