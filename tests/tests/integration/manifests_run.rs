//! The Kubernetes manifests under `deploy/` run the real binaries.
//!
//! No cluster runs in CI, so this test does what a cluster would with the
//! rendered manifests (`kubectl kustomize`), on this machine:
//! `dev_overlay_runs_the_example_query_exactly_once` takes the etcd,
//! driver, executor and Job containers of the dev overlay and the example
//! query, with their command, args and environment (ConfigMaps, Secrets,
//! downward API and `$(VAR)` resolved), makes cluster names and paths local
//! (see `sluice_tests::manifests`), and runs them: etcd, two drivers, three
//! executors, then the submit and verify Jobs' scripts. Security is on as
//! rendered: the Secrets come from the real `sluice certs init` and the
//! `kubectl create secret` commands of deploy/README.md, mounted where the
//! manifests mount them, so etcd serves TLS with client certificates (peers
//! too), the drivers serve TLS and check the executors' certificates and
//! the Jobs' tokens, and reach etcd over TLS. The query ends
//! FINISHED and exactly-once; the probes answer on the ports and paths
//! the manifests name; a SIGTERMed leader hands over within its grace
//! period. A flag the binaries do not accept fails here (clap exits).
//!
//! The settings checks are in `manifests_settings.rs`, the checks of what
//! must agree across objects in `manifests_static.rs`.

use sluice_common::checkpoint::QUERIES_DIR;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_common::tls::ClientTls;
use sluice_tests::bins::{DRIVER, EXECUTOR};
use sluice_tests::manifests::{
    DEV, EXAMPLE, LocalPlan, probe, readme_secrets, render, start, start_etcd, submit_and_verify,
    wait_one_ready,
};
use sluice_tests::{Client, Cluster, QueryState, assert_exactly_once, http};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_overlay_runs_the_example_query_exactly_once() {
    let cluster = Cluster::new("manifests");
    let pki_parent = cluster.root().join("secrets");
    let manifests = render(DEV)
        .with(render(EXAMPLE))
        .with(readme_secrets(&pki_parent));
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
    let _etcd = start_etcd(&cluster, &plan).await;

    // The drivers: one leader (Ready), one standby.
    let drivers = start(&cluster, &plan, "sluice-driver", "driver", DRIVER, &[]);
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
    let executors = start(
        &cluster,
        &plan,
        "sluice-executor",
        "executor",
        EXECUTOR,
        &[],
    );

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
    let took = submit_and_verify(&cluster, "example", &submit, &verify).await;
    eprintln!("the example query finished and verified in {:?}", took);

    let drivers_arg = drivers
        .iter()
        .map(|(p, _)| p.local_addr(&Value::from("grpc")))
        .collect::<Vec<_>>()
        .join(",");
    // Plaintext is refused; TLS with the viewer token is served.
    let pki = pki_parent.join("pki");
    let viewer = std::fs::read_to_string(pki.join("viewer.token")).unwrap();
    let tls = ClientTls::from_flags(Some(pki.join("ca.pem")), None, None).unwrap();
    assert!(
        Client::new(&drivers_arg).get(&query).await.is_err(),
        "a plaintext client is served"
    );
    assert!(
        Client::secured(&drivers_arg, &tls, None)
            .get(&query)
            .await
            .is_err(),
        "a client without a token is served"
    );
    let mut client = Client::secured(&drivers_arg, &tls, Some(viewer.trim()));
    let status = client
        .wait_state(&query, QueryState::Finished, Duration::from_secs(10))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    assert_exactly_once(&sink, total).await;
    assert!(
        plan.shared_path("/data/checkpoints")
            .join(QUERIES_DIR)
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
    executors[0].1.term();
    assert!(
        executors[0].1.wait_exit(executor_grace).await.is_some(),
        "an executor did not exit within terminationGracePeriodSeconds ({executor_grace:?})"
    );
}
