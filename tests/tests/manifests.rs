//! The Kubernetes manifests under `deploy/` run the real binaries.
//!
//! No cluster runs in CI, so these tests do what a cluster would with the
//! rendered manifests (`kubectl kustomize`), on this machine:
//!
//! - `dev_overlay_runs_the_example_query_exactly_once` takes the etcd,
//!   driver, executor and Job containers of the dev overlay and the example
//!   query, with their command, args and environment (ConfigMaps, downward
//!   API and `$(VAR)` resolved), makes cluster names and paths local (see
//!   `sluice_tests::manifests`), and runs them: etcd, two drivers, three
//!   executors, then the submit and verify Jobs' scripts. The query ends
//!   FINISHED and exactly-once; the probes answer on the ports and paths
//!   the manifests name; a SIGTERMed leader hands over within its grace
//!   period. A flag the binaries do not accept fails here (clap exits).
//! - `every_sluice_variable_is_read_by_its_binary`: an environment variable
//!   a binary does not read would be ignored silently, so every `SLUICE_*`
//!   name in every rendered manifest must be one its binary's `--help`
//!   lists.
//! - the static tests check what must agree across objects: probe ports
//!   and the HTTP listen address, the etcd members and SLUICE_ETCD, the
//!   Services and the container ports, the query specs and their Jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_common::spec::QuerySpec;
use sluice_tests::bins::{CLI, DRIVER, EXECUTOR, bin, bin_dir};
use sluice_tests::manifests::{
    LocalCommand, LocalPlan, LocalPod, Manifests, PodFacts, Workload, find_on_path, help_env_vars,
    items, render, repo_root, str_at,
};
use sluice_tests::{Client, Cluster, Process, QueryState, assert_exactly_once, http};

const BASE: &str = "deploy/k8s/base";
const DEV: &str = "deploy/k8s/overlays/dev";
const PROD: &str = "deploy/k8s/overlays/prod";
const EXAMPLE: &str = "deploy/k8s/example";
const CHAOS_QUERY: &str = "deploy/chaos/query";

const OVERLAYS: [&str; 3] = [BASE, DEV, PROD];
const QUERIES: [&str; 2] = [EXAMPLE, CHAOS_QUERY];

/// The variable `sluice_common::telemetry` reads besides the flags.
const LOG_VAR: &str = "SLUICE_LOG";

/// Pod facts for static checks.
fn facts() -> PodFacts {
    PodFacts {
        name: "pod-0".into(),
        namespace: "sluice".into(),
        ip: "10.1.2.3".into(),
    }
}

/// `$SLUICE_ETCD_BIN`, else `etcd` on PATH, else `/usr/bin/etcd`.
fn etcd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ETCD_BIN") {
        return PathBuf::from(p);
    }
    let path = find_on_path("etcd").unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    assert!(
        path.is_file(),
        "etcd not found: run scripts/deps.sh (Debian package etcd-server) or set SLUICE_ETCD_BIN"
    );
    path
}

/// The `--help` output of a binary (and of some of its subcommands).
fn help(program: &str, subcommands: &[&str]) -> String {
    let mut text = String::new();
    let mut runs: Vec<Vec<&str>> = vec![vec!["--help"]];
    runs.extend(subcommands.iter().map(|s| vec![*s, "--help"]));
    for args in runs {
        let out = std::process::Command::new(bin(program))
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} --help: {e}"));
        assert!(out.status.success(), "{program} {args:?} failed");
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    text
}

/// Which binary a container of the Sluice image runs: `args[0]`, or
/// `sluice` for a shell script (the Jobs).
fn binary_of(w: &Workload, c: &Value) -> Option<&'static str> {
    let first = items(c, "/args")
        .first()
        .and_then(Value::as_str)
        .unwrap_or("");
    match first {
        "sluice-driver" => Some(DRIVER),
        "sluice-executor" => Some(EXECUTOR),
        "sluice" => Some(CLI),
        "/bin/sh" => Some(CLI),
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

fn env_of(m: &Manifests, c: &Value) -> BTreeMap<String, String> {
    m.container_env(c, &facts()).into_iter().collect()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr:?} is not host:port"))
}

/// The `[env: ...]` variables each binary's `--help` lists.
fn documented_env() -> BTreeMap<&'static str, BTreeSet<String>> {
    let documented: BTreeMap<&str, BTreeSet<String>> = [
        (DRIVER, help_env_vars(&help(DRIVER, &[]))),
        (EXECUTOR, help_env_vars(&help(EXECUTOR, &[]))),
        (
            CLI,
            help_env_vars(&help(CLI, &["submit", "status", "wait", "verify"])),
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
    let plan = LocalPlan::new(render(DEV), &cluster.root().join("k8s"), |w| {
        u32::from(w.name == "sluice-driver" || w.name == "etcd")
    });
    let pod = plan.pods_of("sluice-driver")[0];
    let cmd = plan.command(pod, pod.workload.container("driver"));

    // clap refuses an unknown flag: the container would crash-loop.
    let mut args = cmd.args.clone();
    args.push("--lease-ttl=3000".into());
    let p = cluster.spawn_with_env("bad-flag", &bin(DRIVER), args, cmd.env.clone());
    let status = tokio_block(p.wait_exit(Duration::from_secs(10))).expect("exits");
    assert!(!status.success());
    let log = std::fs::read_to_string(p.log_path()).unwrap_or_default();
    assert!(log.contains("unexpected argument '--lease-ttl'"), "{log}");

    // An object-store checkpoint root (the prod overlay's S3 note) is
    // refused at startup today; deploy/k8s/overlays/prod/README.md says so.
    let mut env = cmd.env.clone();
    for (k, v) in env.iter_mut() {
        if k == "SLUICE_CHECKPOINT_ROOT" {
            *v = "s3://bucket/sluice/checkpoints".into();
        }
    }
    let p = cluster.spawn_with_env("s3-root", &bin(DRIVER), cmd.args.clone(), env);
    let status = tokio_block(p.wait_exit(Duration::from_secs(10))).expect("exits");
    assert!(!status.success());
    let log = std::fs::read_to_string(p.log_path()).unwrap_or_default();
    assert!(log.contains("unsupported location"), "{log}");
}

fn tokio_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

#[test]
fn the_image_runs_the_binaries_under_tini_as_non_root() {
    let dockerfile = std::fs::read_to_string(repo_root().join("deploy/docker/Dockerfile")).unwrap();
    let entrypoint = dockerfile
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("an ENTRYPOINT");
    assert!(
        entrypoint.contains("[\"/usr/bin/tini\", \"--\"]"),
        "exec-form tini entrypoint: {entrypoint}"
    );
    for binary in [DRIVER, EXECUTOR, CLI] {
        assert!(
            dockerfile.contains(&format!("target/release/{binary} ")),
            "the image copies {binary}"
        );
    }
    let user = dockerfile
        .lines()
        .rfind(|l| l.starts_with("USER "))
        .expect("a USER line");
    assert!(
        !user.contains("root") && !user.contains(" 0"),
        "non-root: {user}"
    );
    assert!(dockerfile.contains("protobuf-compiler"));
}

#[test]
fn probes_ports_and_services_agree_with_the_driver_settings() {
    for dir in OVERLAYS {
        let m = render(dir);
        let w = m.workload("sluice-driver");
        let c = w.container("driver");
        let env = env_of(&m, c);
        let http_port = port_of(&env["SLUICE_HTTP"]);
        let grpc_port = port_of(&env["SLUICE_LISTEN"]);

        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            let get = c
                .pointer(&format!("/{probe}/httpGet"))
                .unwrap_or_else(|| panic!("{dir}: the driver has no {probe}.httpGet"));
            assert_eq!(str_at(get, "/path"), path, "{dir}: {probe} path");
            let port = w.container_port(&get["port"]);
            assert_eq!(
                port, http_port,
                "{dir}: {probe} port {port} is not SLUICE_HTTP's {http_port}"
            );
        }
        assert_eq!(w.container_port(&Value::from("grpc")), grpc_port);
        assert_eq!(
            env["SLUICE_ADVERTISE"],
            format!("{}:{grpc_port}", facts().ip),
            "{dir}: the driver advertises its pod IP and gRPC port"
        );
        assert_eq!(
            env["SLUICE_ID"],
            facts().name,
            "{dir}: SLUICE_ID is the pod name"
        );
        assert_eq!(w.annotations["prometheus.io/scrape"], "true");
        assert_eq!(w.annotations["prometheus.io/path"], "/metrics");
        assert_eq!(
            w.annotations["prometheus.io/port"].parse::<u16>().unwrap(),
            http_port,
            "{dir}: the scrape port is SLUICE_HTTP's"
        );

        // The leader-only Service and the headless peers Service.
        for (name, headless) in [("sluice-driver", false), ("sluice-driver-peers", true)] {
            let svc = m.get("Service", name);
            assert_eq!(str_at(svc, "/spec/clusterIP") == "None", headless, "{name}");
            if headless {
                assert_eq!(svc["spec"]["publishNotReadyAddresses"], true, "{name}");
            } else {
                assert_ne!(
                    svc["spec"]["publishNotReadyAddresses"], true,
                    "{name} must route to the Ready (leader) pod only"
                );
            }
            let ports: BTreeMap<u64, u16> = items(svc, "/spec/ports")
                .iter()
                .map(|p| {
                    (
                        p["port"].as_u64().unwrap(),
                        w.container_port(&p["targetPort"]),
                    )
                })
                .collect();
            assert_eq!(
                ports,
                BTreeMap::from([(7070, grpc_port), (7071, http_port)]),
                "{dir}: {name}"
            );
        }

        // Grace periods: the leader resigns at once on SIGTERM; an executor
        // drains for up to 10 s.
        let grace = |w: &Workload| w.pod_spec["terminationGracePeriodSeconds"].as_u64();
        let lease_s = env["SLUICE_LEASE_TTL_MS"].parse::<u64>().unwrap() / 1000;
        assert!(
            grace(&w).is_some_and(|g| g >= 5 && g >= lease_s),
            "{dir}: driver grace"
        );
        let executor = m.workload("sluice-executor");
        assert!(
            grace(&executor).is_some_and(|g| g > 10),
            "{dir}: executor grace"
        );

        // The etcd members, their count and the drivers' endpoints agree.
        let etcd = m.workload("etcd");
        let etcd_env = env_of(&m, etcd.only_container());
        let members: Vec<String> = (0..etcd.replicas).map(|i| format!("etcd-{i}")).collect();
        let initial: Vec<String> = etcd_env["ETCD_INITIAL_CLUSTER"]
            .split(',')
            .map(|m| m.split('=').next().unwrap().to_string())
            .collect();
        assert_eq!(initial, members, "{dir}: ETCD_INITIAL_CLUSTER vs replicas");
        let endpoints: Vec<String> = env["SLUICE_ETCD"].split(',').map(str::to_string).collect();
        let expected: Vec<String> = members
            .iter()
            .map(|m| format!("http://{m}.etcd:2379"))
            .collect();
        assert_eq!(endpoints, expected, "{dir}: SLUICE_ETCD vs the members");
        assert_eq!(etcd.service_name.as_deref(), Some("etcd"));

        // Checkpoints on the shared volume, mounted by drivers and executors.
        let pvc = m.get("PersistentVolumeClaim", "sluice-checkpoints");
        let modes: Vec<&str> = items(pvc, "/spec/accessModes")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let want = if dir == DEV {
            "ReadWriteOnce"
        } else {
            "ReadWriteMany"
        };
        assert_eq!(modes, vec![want], "{dir}: access modes");
        for (name, container) in [("sluice-driver", "driver"), ("sluice-executor", "executor")] {
            let w = m.workload(name);
            let mount = items(w.container(container), "/volumeMounts")
                .iter()
                .find(|v| str_at(v, "/mountPath") == "/data")
                .unwrap_or_else(|| panic!("{dir}: {name} mounts nothing at /data"));
            let vol = items(&w.pod_spec, "/volumes")
                .iter()
                .find(|v| v["name"] == mount["name"])
                .unwrap();
            assert_eq!(
                str_at(vol, "/persistentVolumeClaim/claimName"),
                "sluice-checkpoints"
            );
        }
        assert!(env["SLUICE_CHECKPOINT_ROOT"].starts_with("/data/"));
    }
}

#[test]
fn query_jobs_agree_with_their_specs() {
    for dir in QUERIES {
        let m = render(dir);
        let spec_cm = m
            .of_kind("ConfigMap")
            .find(|c| c.pointer("/data/query.yaml").is_some())
            .unwrap_or_else(|| panic!("{dir}: no ConfigMap with query.yaml"));
        let spec = QuerySpec::parse(str_at(spec_cm, "/data/query.yaml"))
            .unwrap_or_else(|e| panic!("{dir}: the spec is invalid: {e}"));
        let jobs: Vec<Workload> = m.workloads();
        assert_eq!(jobs.len(), 2, "{dir}: a submit and a verify Job");
        for job in &jobs {
            let env = env_of(&m, job.only_container());
            assert_eq!(env["QUERY"], spec.name, "{dir}: {}", job.name);
            assert_eq!(env["SINK"], spec.sink_path(), "{dir}: {}", job.name);
            assert_eq!(
                env["TOTAL_ROWS"],
                spec.rate().total_rows.expect("total_rows").to_string(),
                "{dir}: {}",
                job.name
            );
            assert!(env["SLUICE_DRIVER"].contains("sluice-driver:7070"));
        }
        assert!(
            spec.sink_path().starts_with("/data/sinks/"),
            "{dir}: the sink is on the shared volume"
        );
    }
}

/// Runs a Job container's script: `/bin/sh -ec SCRIPT` with the Sluice
/// binaries first on PATH, as in the image.
async fn run_job(cluster: &Cluster, name: &str, cmd: &LocalCommand) -> (i32, String, String) {
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
        if key.to_string_lossy().starts_with("SLUICE_") {
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

/// GET `path` on the probe's port of `pod`.
async fn probe(pod: &LocalPod, probe: &Value) -> Result<u16, String> {
    let get = &probe["httpGet"];
    http::status(&pod.local_addr(&get["port"]), str_at(get, "/path")).await
}

/// Waits until exactly one driver passes its readiness probe; its index.
async fn wait_one_ready(drivers: &[(&LocalPod, Process)], readiness: &Value) -> usize {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_overlay_runs_the_example_query_exactly_once() {
    let cluster = Cluster::new("manifests");
    let manifests = render(DEV).with(render(EXAMPLE));
    let plan = LocalPlan::new(manifests, &cluster.root().join("k8s"), |w| {
        if w.kind == "Job" { 1 } else { w.replicas }
    });
    let etcd_pods = plan.pods_of("etcd");
    let driver_pods = plan.pods_of("sluice-driver");
    let executor_pods = plan.pods_of("sluice-executor");
    assert_eq!(
        (etcd_pods.len(), driver_pods.len(), executor_pods.len()),
        (1, 2, 3),
        "the dev overlay runs 1 etcd member, 2 drivers and 3 executors"
    );

    // etcd, with the StatefulSet's environment.
    let mut etcds = Vec::new();
    for pod in &etcd_pods {
        let c = pod.workload.only_container();
        let cmd = plan.command(pod, c);
        assert_eq!(
            cmd.program, "/usr/local/bin/etcd",
            "the etcd image's binary"
        );
        eprintln!("{}: etcd {:?} env {:?}", pod.name(), cmd.args, cmd.env);
        etcds.push(cluster.spawn_with_env(pod.name(), &etcd_bin(), cmd.args, cmd.env));
    }
    for (pod, process) in etcd_pods.iter().zip(&etcds) {
        let c = pod.workload.only_container();
        for p in ["readinessProbe", "livenessProbe"] {
            let get = &c[p]["httpGet"];
            let addr = pod.local_addr(&get["port"]);
            if let Err(e) =
                http::wait_200(&addr, str_at(get, "/path"), Duration::from_secs(30)).await
            {
                panic!("etcd {p}: {e}; log tail:\n{}", process.log_tail(40));
            }
        }
        let log = std::fs::read_to_string(process.log_path()).unwrap_or_default();
        assert!(
            !log.contains("unrecognized environment variable"),
            "etcd ignored a variable of the StatefulSet:\n{log}"
        );
    }

    // The drivers: one leader (Ready), one standby.
    let mut drivers: Vec<(&LocalPod, Process)> = Vec::new();
    for pod in &driver_pods {
        let cmd = plan.command(pod, pod.workload.container("driver"));
        assert_eq!(cmd.program, DRIVER);
        eprintln!("{}: {DRIVER} {:?} env {:?}", pod.name(), cmd.args, cmd.env);
        let process = cluster.spawn_with_env(pod.name(), &bin(DRIVER), cmd.args, cmd.env);
        drivers.push((pod, process));
    }
    let container = driver_pods[0].workload.container("driver");
    let readiness = &container["readinessProbe"];
    let liveness = &container["livenessProbe"];
    let leader = wait_one_ready(&drivers, readiness).await;
    for (i, (pod, _)) in drivers.iter().enumerate() {
        assert_eq!(
            probe(pod, liveness).await,
            Ok(200),
            "{} liveness",
            pod.name()
        );
        let want = if i == leader { 200 } else { 503 };
        assert_eq!(
            probe(pod, readiness).await,
            Ok(want),
            "{} readiness",
            pod.name()
        );
        let scrape = &pod.workload.annotations;
        let addr = format!(
            "127.0.0.1:{}",
            pod.ports[&scrape["prometheus.io/port"].parse().unwrap()]
        );
        assert_eq!(
            http::status(&addr, &scrape["prometheus.io/path"]).await,
            Ok(200),
            "{} metrics",
            pod.name()
        );
    }

    // The executors.
    let mut executors = Vec::new();
    for pod in &executor_pods {
        let cmd = plan.command(pod, pod.workload.container("executor"));
        assert_eq!(cmd.program, EXECUTOR);
        eprintln!(
            "{}: {EXECUTOR} {:?} env {:?}",
            pod.name(),
            cmd.args,
            cmd.env
        );
        executors.push(cluster.spawn_with_env(pod.name(), &bin(EXECUTOR), cmd.args, cmd.env));
    }

    // The example Jobs, applied together: verify first waits for the
    // query that submit creates, then for FINISHED, then checks the sink.
    let submit_pod = plan.pods_of("example-submit")[0];
    let verify_pod = plan.pods_of("example-verify")[0];
    let submit = plan.command(submit_pod, submit_pod.workload.only_container());
    let verify = plan.command(verify_pod, verify_pod.workload.only_container());
    let env: BTreeMap<String, String> = verify.env.iter().cloned().collect();
    let (query, sink, total) = (
        env["QUERY"].clone(),
        PathBuf::from(&env["SINK"]),
        env["TOTAL_ROWS"].parse::<u64>().unwrap(),
    );
    assert!(
        sink.starts_with(cluster.root()),
        "the sink {} is on the local shared volume",
        sink.display()
    );
    let started = Instant::now();
    let verify_run = run_job(&cluster, "example-verify", &verify);
    let submit_run = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        run_job(&cluster, "example-submit", &submit).await
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
    eprintln!(
        "the example query finished and verified in {:?}",
        started.elapsed()
    );

    let drivers_arg = drivers
        .iter()
        .map(|(p, _)| p.local_addr(&Value::from("grpc")))
        .collect::<Vec<_>>()
        .join(",");
    let mut client = Client::new(&drivers_arg);
    let status = client
        .wait_state(&query, QueryState::Finished, Duration::from_secs(10))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    assert_exactly_once(&sink, total).await;
    assert!(
        plan.shared_path("/data/checkpoints")
            .join("queries")
            .join(&query)
            .is_dir(),
        "the checkpoint is under SLUICE_CHECKPOINT_ROOT on the shared volume"
    );

    // A graceful handover within the grace period: SIGTERM the leader; it
    // exits and the standby passes its readiness probe before the kubelet
    // would SIGKILL.
    let grace = Duration::from_secs(
        driver_pods[0].workload.pod_spec["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap(),
    );
    let t0 = Instant::now();
    drivers[leader].1.term();
    let exited = drivers[leader].1.wait_exit(grace).await;
    assert!(
        exited.is_some(),
        "the leader did not exit within terminationGracePeriodSeconds ({grace:?})"
    );
    let standby = 1 - leader;
    let deadline = t0 + grace;
    while probe(drivers[standby].0, readiness).await != Ok(200) {
        assert!(
            Instant::now() < deadline,
            "the standby was not ready within {grace:?} of SIGTERM to the leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("handover after SIGTERM took {:?}", t0.elapsed());

    // An executor drains and exits within its grace period.
    let executor_grace = Duration::from_secs(
        executor_pods[0].workload.pod_spec["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap(),
    );
    executors[0].term();
    assert!(
        executors[0].wait_exit(executor_grace).await.is_some(),
        "an executor did not exit within terminationGracePeriodSeconds ({executor_grace:?})"
    );
}
