//! Running the pods of a [`LocalPlan`] as processes of a [`Cluster`]: the
//! etcd members ([`start_etcd`]), the drivers and executors ([`start`]),
//! each with the command and environment the manifests give it; a Job's
//! shell script with the Sluice binaries on PATH ([`run_job`]); and the
//! HTTP probes of a pod ([`probe`], [`wait_one_ready`]).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::kustomize::str_at;
use super::plan::{LocalCommand, LocalPlan, LocalPod};
use crate::bins::{CLI, bin, bin_dir};
use crate::cluster::Cluster;
use crate::etcd::etcd_bin;
use crate::http;
use crate::process::Process;

/// A planned pod and the process that runs its container.
pub type Running<'a> = (&'a LocalPod, Process);

/// Starts every planned `etcd` pod with the StatefulSet's command and
/// environment, then waits until each passes its readiness and liveness
/// probes (all members first: a member alone has no quorum). Panics when
/// one does not, or when etcd ignored a variable of the StatefulSet.
pub async fn start_etcd<'a>(cluster: &Cluster, plan: &'a LocalPlan) -> Vec<Running<'a>> {
    let mut running = Vec::new();
    for pod in plan.pods_of("etcd") {
        let cmd = plan.command(pod, pod.workload.only_container());
        assert_eq!(
            cmd.program, "/usr/local/bin/etcd",
            "the etcd image's binary"
        );
        eprintln!("{}: etcd {:?} env {:?}", pod.name(), cmd.args, cmd.env);
        let process = cluster.spawn_with_env(pod.name(), &etcd_bin(), cmd.args, cmd.env);
        running.push((pod, process));
    }
    for (pod, process) in &running {
        let c = pod.workload.only_container();
        for p in ["readinessProbe", "livenessProbe"] {
            let get = &c[p]["httpGet"];
            let addr = pod.local_addr(&get["port"]);
            if let Err(e) =
                http::wait_200(&addr, str_at(get, "/path"), Duration::from_secs(30)).await
            {
                panic!(
                    "{} {p}: {e}; log tail:\n{}",
                    pod.name(),
                    process.log_tail(40)
                );
            }
        }
        let log = std::fs::read_to_string(process.log_path()).unwrap_or_default();
        assert!(
            !log.contains("unrecognized environment variable"),
            "etcd ignored a variable of the StatefulSet:\n{log}"
        );
    }
    running
}

/// Starts container `container` of every planned pod of `workload`,
/// which must run `sluice <node>` (`node` is [`crate::bins::DRIVER`] or
/// [`crate::bins::EXECUTOR`]), with `extra` set in its environment (see
/// [`LocalCommand::set_env`]). Does not wait.
pub fn start<'a>(
    cluster: &Cluster,
    plan: &'a LocalPlan,
    workload: &str,
    container: &str,
    node: &str,
    extra: &[(String, String)],
) -> Vec<Running<'a>> {
    plan.pods_of(workload)
        .into_iter()
        .map(|pod| {
            let mut cmd = plan.command(pod, pod.workload.container(container));
            assert_eq!(
                (cmd.program.as_str(), cmd.args.first().map(String::as_str)),
                (CLI, Some(node)),
                "{workload} runs `{CLI} {node}`"
            );
            cmd.set_env(extra);
            eprintln!("{}: {CLI} {:?} env {:?}", pod.name(), cmd.args, cmd.env);
            let process = cluster.spawn_with_env(pod.name(), &bin(CLI), cmd.args, cmd.env);
            (pod, process)
        })
        .collect()
}

/// Runs a Job container's script: `/bin/sh -ec SCRIPT` with the Sluice
/// binaries first on PATH, as in the image, and only the environment the
/// manifests give it (no `SLUICE_*` or `AWS_*` of the test's own). The
/// exit code, stdout and stderr.
pub async fn run_job(cluster: &Cluster, name: &str, cmd: &LocalCommand) -> (i32, String, String) {
    assert_eq!(cmd.program, "/bin/sh", "{name}: a shell script");
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .args(&cmd.args)
        .current_dir(cluster.root())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("SLUICE_") || k.starts_with("AWS_") {
            command.env_remove(&key);
        }
    }
    command.envs(cmd.env.iter().map(|(k, v)| (k, v)));
    command.env("PATH", path).env("NO_COLOR", "1");
    let out = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .unwrap_or_else(|_| panic!("Job {name} ran over 180 s"))
        .unwrap_or_else(|e| panic!("cannot run Job {name}: {e}"));
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("Job {name} exited {code}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}");
    (code, stdout, stderr)
}

/// GET the path of an `httpGet` probe on its port of `pod`.
pub async fn probe(pod: &LocalPod, probe: &Value) -> Result<u16, String> {
    let get = &probe["httpGet"];
    http::status(&pod.local_addr(&get["port"]), str_at(get, "/path")).await
}

/// Waits until exactly one driver passes its readiness probe; its index.
/// Panics when one exits, when two are ready at once, or after 30 s.
pub async fn wait_one_ready(drivers: &[Running<'_>], readiness: &Value) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut ready = Vec::new();
        let mut answers = Vec::new();
        for (i, (pod, process)) in drivers.iter().enumerate() {
            if let Some(status) = process.exit_status() {
                panic!(
                    "{} exited ({status}); log tail:\n{}",
                    pod.name(),
                    process.log_tail(40)
                );
            }
            let r = probe(pod, readiness).await;
            if r == Ok(200) {
                ready.push(i);
            }
            answers.push(r);
        }
        if ready.len() == 1 {
            return ready[0];
        }
        assert!(
            ready.len() < 2,
            "two drivers are ready at once: {answers:?}"
        );
        assert!(
            Instant::now() < deadline,
            "no driver passed its readiness probe within 30 s: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs an example's verify Job and, half a second later, its submit Job,
/// as a cluster would start both: the submit Job waits for FINISHED, the
/// verify Job waits for the query and checks its sink. Asserts both
/// succeed and the check is exact; returns how long it took.
pub async fn submit_and_verify(
    cluster: &Cluster,
    name: &str,
    submit: &LocalCommand,
    verify: &LocalCommand,
) -> std::time::Duration {
    let started = std::time::Instant::now();
    let (verify_name, submit_name) = (format!("{name}-verify"), format!("{name}-submit"));
    let verify_run = run_job(cluster, &verify_name, verify);
    let submit_run = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        run_job(cluster, &submit_name, submit).await
    };
    let ((verify_code, verify_out, _), (submit_code, submit_out, _)) =
        tokio::join!(verify_run, submit_run);
    assert_eq!(submit_code, 0, "the submit Job succeeds");
    assert!(submit_out.contains("FINISHED"), "submit waits for FINISHED");
    assert_eq!(verify_code, 0, "the verify Job succeeds");
    assert!(
        verify_out.contains("missing: 0\n") && verify_out.contains("duplicated: 0\n"),
        "{verify_out}"
    );
    started.elapsed()
}
