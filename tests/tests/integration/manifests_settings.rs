//! The settings the manifests give the binaries are ones the binaries take.
//!
//! - `every_sluice_variable_is_read_by_its_binary`: an environment variable
//!   a binary does not read would be ignored silently, so every `SLUICE_*`
//!   name in every rendered manifest must be one its binary's `--help`
//!   lists.
//! - `a_flag_or_root_the_driver_does_not_accept_stops_it`: the driver, with
//!   the dev overlay's command and environment, exits on an unknown flag and
//!   on an object-store checkpoint root.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use sluice_tests::Cluster;
use sluice_tests::bins::{CLI, DRIVER, EXECUTOR, bin};
use sluice_tests::manifests::{
    DEV, LocalPlan, Manifests, OVERLAYS, QUERIES, Workload, help_env_vars, items, readme_secrets,
    render, repo_root, str_at,
};

/// The variable `sluice_common::telemetry` reads besides the flags.
const LOG_VAR: &str = "SLUICE_LOG";

/// The `--help` output of `sluice` (or of a node: `sluice driver`), and of
/// some of its subcommands.
fn help(node: Option<&str>, subcommands: &[&str]) -> String {
    let mut text = String::new();
    let mut runs: Vec<Vec<&str>> = vec![vec!["--help"]];
    runs.extend(subcommands.iter().map(|s| vec![*s, "--help"]));
    let program = node.unwrap_or(CLI);
    for args in runs {
        let args: Vec<&str> = node.into_iter().chain(args).collect();
        let out = std::process::Command::new(bin(CLI))
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} --help: {e}"));
        assert!(out.status.success(), "{program} {args:?} failed");
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    text
}

/// What a container of the Sluice image runs: a node (`sluice driver`,
/// `sluice executor`), or the client `sluice` (also for a shell script:
/// the Jobs).
fn binary_of(w: &Workload, c: &Value) -> Option<&'static str> {
    let args = items(c, "/args");
    let word = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or("");
    let first = word(0);
    match (first, word(1)) {
        ("sluice", "driver") => Some(DRIVER),
        ("sluice", "executor") => Some(EXECUTOR),
        ("sluice", _) | ("/bin/sh", _) => Some(CLI),
        _ if str_at(c, "/image").contains("sluice") => panic!(
            "{} {}: container {} of the Sluice image runs {first:?}, not a Sluice binary",
            w.kind,
            w.name,
            str_at(c, "/name")
        ),
        _ => None,
    }
}

/// Every rendered object of the overlays and the query kustomizations.
fn all_rendered() -> Vec<(&'static str, Manifests)> {
    OVERLAYS
        .iter()
        .chain(QUERIES.iter())
        .map(|d| (*d, render(d)))
        .collect()
}

/// The `[env: ...]` variables each binary's `--help` lists.
fn documented_env() -> BTreeMap<&'static str, BTreeSet<String>> {
    let documented: BTreeMap<&str, BTreeSet<String>> = [
        (DRIVER, help_env_vars(&help(Some(DRIVER), &[]))),
        (EXECUTOR, help_env_vars(&help(Some(EXECUTOR), &[]))),
        (
            CLI,
            help_env_vars(&help(None, &["submit", "status", "wait", "verify"])),
        ),
    ]
    .into_iter()
    .collect();
    for (bin, vars) in &documented {
        assert!(
            !vars.is_empty(),
            "{bin} --help lists no [env: ...] variables; the check would be vacuous"
        );
    }
    documented
}

/// Every `SLUICE_*` variable a container sets that its binary does not
/// read, and every other misuse of the Sluice image, as messages; and the
/// number of variables checked.
fn env_errors(
    dir: &str,
    m: &Manifests,
    documented: &BTreeMap<&str, BTreeSet<String>>,
) -> (Vec<String>, usize) {
    let mut errors = Vec::new();
    let mut checked = 0;
    for w in m.workloads() {
        for c in w.containers() {
            let names = m.container_env_names(c);
            let Some(binary) = binary_of(&w, c) else {
                let stray: Vec<&String> =
                    names.iter().filter(|n| n.starts_with("SLUICE_")).collect();
                if !stray.is_empty() {
                    errors.push(format!(
                        "{dir}: {} {} sets {stray:?} but runs no Sluice binary",
                        w.kind, w.name
                    ));
                }
                continue;
            };
            for name in names.iter().filter(|n| n.starts_with("SLUICE_")) {
                checked += 1;
                if !(documented[binary].contains(name) || name == LOG_VAR) {
                    errors.push(format!(
                        "{dir}: {} {} container {} sets {name}, which {binary} does not read \
                         (its --help lists {:?})",
                        w.kind,
                        w.name,
                        str_at(c, "/name"),
                        documented[binary]
                    ));
                }
            }
            // A Service named sluice-driver would otherwise inject
            // SLUICE_DRIVER_SERVICE_HOST and the like into the environment.
            if w.pod_spec["enableServiceLinks"] != false {
                errors.push(format!(
                    "{dir}: {} {} runs {binary} without enableServiceLinks: false",
                    w.kind, w.name
                ));
            }
            // The image's entrypoint (tini) must stay in front.
            if c.pointer("/command").is_some() {
                errors.push(format!(
                    "{dir}: {} {} sets `command`, which would replace tini; set `args`",
                    w.kind, w.name
                ));
            }
        }
    }
    (errors, checked)
}

#[test]
fn every_sluice_variable_is_read_by_its_binary() {
    let documented = documented_env();
    // SLUICE_LOG is the log filter, read by the telemetry setup, not a flag.
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let telemetry = std::fs::read_to_string(repo_root().join("common/src/telemetry.rs")).unwrap();
    assert!(readme.contains(LOG_VAR) && telemetry.contains(&format!("\"{LOG_VAR}\"")));

    let mut checked = 0;
    for (dir, m) in all_rendered() {
        let (errors, n) = env_errors(dir, &m, &documented);
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        checked += n;
    }
    assert!(checked > 20, "only {checked} SLUICE_* variables checked");

    // The check catches a misspelt variable.
    let mut m = render(DEV);
    let cm = m
        .objects
        .iter_mut()
        .find(|o| str_at(o, "/metadata/name").starts_with("sluice-driver-config"))
        .expect("the driver ConfigMap");
    cm["data"]["SLUICE_LEASE_TTL"] = Value::from("3000");
    let (errors, _) = env_errors(DEV, &m, &documented);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("SLUICE_LEASE_TTL,"), "{errors:?}");
}

#[test]
fn a_flag_or_root_the_driver_does_not_accept_stops_it() {
    let cluster = Cluster::new("manifests-reject");
    // Planned (so that names resolve), not started: both fail before they
    // would reach etcd.
    let secrets = readme_secrets(&cluster.root().join("secrets"));
    let plan = LocalPlan::new(
        render(DEV).with(secrets),
        &cluster.root().join("k8s"),
        |w| u32::from(w.name == "sluice-driver" || w.name == "etcd"),
    );
    let pod = plan.pods_of("sluice-driver")[0];
    let cmd = plan.command(pod, pod.workload.container("driver"));

    // clap refuses an unknown flag: the container would crash-loop.
    let mut args = cmd.args.clone();
    args.push("--lease-ttl=3000".into());
    let p = cluster.spawn_with_env("bad-flag", &bin(CLI), args, cmd.env.clone());
    let status = tokio_block(p.wait_exit(Duration::from_secs(10))).expect("exits");
    assert!(!status.success());
    let log = std::fs::read_to_string(p.log_path()).unwrap_or_default();
    assert!(log.contains("unexpected argument '--lease-ttl'"), "{log}");

    // An object-store checkpoint root without the object store settings
    // (the S3 overlay adds them) stops the driver at startup, naming them.
    let mut env = cmd.env.clone();
    for (k, v) in env.iter_mut() {
        if k == "SLUICE_CHECKPOINT_ROOT" {
            *v = "s3://bucket/sluice/checkpoints".into();
        }
    }
    let p = cluster.spawn_with_env("s3-root", &bin(CLI), cmd.args.clone(), env);
    let status = tokio_block(p.wait_exit(Duration::from_secs(10))).expect("exits");
    assert!(!status.success());
    let log = std::fs::read_to_string(p.log_path()).unwrap_or_default();
    assert!(log.contains("no region: set AWS_REGION"), "{log}");
}

fn tokio_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}
