//! What must agree across the rendered objects, checked without running
//! anything: probe ports and the HTTP listen address, the etcd members and
//! SLUICE_ETCD, the Services and the container ports, the checkpoint
//! volume (or bucket), the query specs and their Jobs, and the image the
//! containers run (tini in front, non-root).

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_common::spec::QuerySpec;
use sluice_tests::bins::CLI;
use sluice_tests::manifests::{
    DEV, EXAMPLE_S3, Manifests, OVERLAYS, PodFacts, QUERIES, S3_OVERLAY, Workload, items,
    placeholder_secrets, render, repo_root, str_at,
};

/// Pod facts for static checks.
fn facts() -> PodFacts {
    PodFacts {
        name: "pod-0".into(),
        namespace: "sluice".into(),
        ip: "10.1.2.3".into(),
    }
}

fn env_of(m: &Manifests, c: &Value) -> BTreeMap<String, String> {
    m.clone()
        .with(placeholder_secrets())
        .container_env(c, &facts())
        .into_iter()
        .collect()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr:?} is not host:port"))
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
    // One binary, `sluice`, runs every role (`sluice driver`, `sluice executor`).
    assert!(
        dockerfile.contains(&format!("cp target/release/{CLI} /out/"))
            && dockerfile.contains(&format!("COPY --from=builder /out/{CLI} /usr/local/bin/")),
        "the image copies the {CLI} binary"
    );
    let user = dockerfile
        .lines()
        .rfind(|l| l.starts_with("USER "))
        .expect("a USER line");
    assert!(
        !user.contains("root") && !user.contains(" 0"),
        "non-root: {user}"
    );
    // The builder installs the one list of build packages (scripts/fresh-check
    // builds Sluice with exactly what the builder stage installs).
    assert!(dockerfile.contains("COPY scripts/build-packages.txt"));
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
            .map(|m| format!("https://{m}.etcd:2379"))
            .collect();
        assert_eq!(endpoints, expected, "{dir}: SLUICE_ETCD vs the members");
        assert_eq!(etcd.service_name.as_deref(), Some("etcd"));

        checkpoint_storage(dir, &m, &env["SLUICE_CHECKPOINT_ROOT"]);
    }
}

/// The checkpoints of an overlay: on the shared volume, mounted by drivers
/// and executors at /data; or, in the S3 overlay, in a bucket with no
/// volume claim at all (`manifests_s3.rs` checks that in detail).
fn checkpoint_storage(dir: &str, m: &Manifests, root: &str) {
    if dir == S3_OVERLAY {
        assert!(root.starts_with("s3://"), "{dir}: checkpoint root {root}");
        assert_eq!(m.of_kind("PersistentVolumeClaim").count(), 0, "{dir}");
        return;
    }
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
    assert!(root.starts_with("/data/"), "{dir}: checkpoint root {root}");
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
            assert_eq!(
                Some(env["SINK"].as_str()),
                spec.sink_path(),
                "{dir}: {}",
                job.name
            );
            assert_eq!(
                env["TOTAL_ROWS"],
                spec.rate()
                    .expect("a rate source")
                    .total_rows
                    .expect("total_rows")
                    .to_string(),
                "{dir}: {}",
                job.name
            );
            assert!(env["SLUICE_DRIVER"].contains("sluice-driver:7070"));
        }
        let sink = spec.sink_path().expect("a file sink");
        let want = if dir == EXAMPLE_S3 {
            "s3://"
        } else {
            "/data/sinks/"
        };
        assert!(
            sink.starts_with(want),
            "{dir}: the sink {sink} is not under {want} (the shared volume or S3)"
        );
    }
}
