//! The S3 overlay (`deploy/k8s/overlays/s3`) and its example query
//! (`deploy/k8s/example-s3`), rendered with `kubectl kustomize`.
//!
//! - `the_s3_overlay_has_no_volume_claim`: neither has a
//!   PersistentVolumeClaim, a pod volume that names one or a mount at
//!   /data, nor a Secret (no keys in git). The drivers, executors and the
//!   verify Job take their AWS_* variables from the Secret `sluice-s3`,
//!   optional so that a role of the ServiceAccount (annotated for IRSA)
//!   can stand in; they share one region, and the checkpoint root and the
//!   example's sink are in one bucket.
//! - `s3_overlay_runs_the_example_query_exactly_once`: the overlay's etcd
//!   members, drivers and executors and the example's submit and verify
//!   Jobs run as processes with their rendered command, args and
//!   environment (see `sluice_tests::manifests`), against moto's S3 server
//!   on loopback in place of the bucket, with TLS, mutual TLS, tokens and
//!   etcd TLS on from the Secrets of deploy/README.md (the real `sluice
//!   certs init`): the Secret `sluice-s3` holds moto's keys, as
//!   `kubectl create secret` would, and AWS_ENDPOINT_URL and
//!   AWS_ALLOW_HTTP point at moto. The query ends FINISHED, the verify
//!   Job's check passes, the checker reading the sink on S3 finds it
//!   exactly-once, the checkpoint is in the bucket, and no local directory
//!   stands in for a shared volume.

use sluice_common::checkpoint::{QUERIES_DIR, Record};
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_common::storage::Path as Key;
use sluice_common::tls::ClientTls;
use sluice_tests::bins::{DRIVER, EXECUTOR};
use sluice_tests::manifests::{
    EXAMPLE_S3, LocalPlan, Manifests, PodFacts, S3_OVERLAY, Workload, items, placeholder_secrets,
    readme_secrets, render, start, start_etcd, str_at, submit_and_verify, wait_one_ready,
};
use sluice_tests::{Client, Cluster, QueryState, S3, assert_exactly_once_at};

/// The Secret the overlay's pods read their AWS_* variables from.
const SECRET: &str = "sluice-s3";
/// The ServiceAccount they run as, for an IAM role instead.
const ACCOUNT: &str = "sluice";
/// The annotation that gives the ServiceAccount an IAM role on EKS.
const IRSA: &str = "eks.amazonaws.com/role-arn";

/// The bucket of an `s3://bucket/prefix` location.
fn bucket_of(location: &str) -> &str {
    let rest = location
        .strip_prefix("s3://")
        .unwrap_or_else(|| panic!("{location} is not on S3"));
    rest.split('/').next().unwrap()
}

/// A container's environment, resolved for a pod of any name.
fn env_of(m: &Manifests, c: &Value) -> BTreeMap<String, String> {
    let facts = PodFacts {
        name: "pod-0".into(),
        namespace: "sluice".into(),
        ip: "10.1.2.3".into(),
    };
    m.clone()
        .with(placeholder_secrets())
        .container_env(c, &facts)
        .into_iter()
        .collect()
}

/// No claim, no volume that names one, nothing at /data, no Secret.
fn assert_no_shared_volume(dir: &str, m: &Manifests) {
    assert_eq!(m.of_kind("PersistentVolumeClaim").count(), 0, "{dir}");
    assert_eq!(m.of_kind("Secret").count(), 0, "{dir}: a Secret in git");
    for w in m.workloads() {
        for v in items(&w.pod_spec, "/volumes") {
            assert!(
                v.pointer("/persistentVolumeClaim").is_none(),
                "{dir}: {} {} has a claim volume: {v}",
                w.kind,
                w.name
            );
        }
        for c in w.containers() {
            for mount in items(c, "/volumeMounts") {
                let path = str_at(mount, "/mountPath");
                assert!(
                    !path.starts_with("/data"),
                    "{dir}: {} mounts {path}",
                    w.name
                );
            }
        }
    }
}

/// The container takes the Secret, optional, and runs as the account.
fn assert_credentials(dir: &str, w: &Workload, c: &Value) {
    let secret = items(c, "/envFrom")
        .iter()
        .find(|f| str_at(f, "/secretRef/name") == SECRET)
        .unwrap_or_else(|| panic!("{dir}: {} does not take the Secret {SECRET}", w.name));
    assert_eq!(
        secret["secretRef"]["optional"], true,
        "{dir}: {}: optional, so that a role can stand in",
        w.name
    );
    assert_eq!(str_at(&w.pod_spec, "/serviceAccountName"), ACCOUNT);
}

#[test]
fn the_s3_overlay_has_no_volume_claim() {
    let overlay = render(S3_OVERLAY);
    let example = render(EXAMPLE_S3);
    assert_no_shared_volume(S3_OVERLAY, &overlay);
    assert_no_shared_volume(EXAMPLE_S3, &example);

    let account = overlay.get("ServiceAccount", ACCOUNT);
    let role = account["metadata"]["annotations"][IRSA].as_str();
    assert!(
        role.is_some_and(|r| r.starts_with("arn:aws:iam::")),
        "the ServiceAccount carries an IAM role for IRSA: {account}"
    );

    let driver = overlay.workload("sluice-driver");
    let executor = overlay.workload("sluice-executor");
    let verify = example.workload("example-s3-verify");
    assert_credentials(S3_OVERLAY, &driver, driver.container("driver"));
    assert_credentials(S3_OVERLAY, &executor, executor.container("executor"));
    assert_credentials(EXAMPLE_S3, &verify, verify.only_container());

    let driver_env = env_of(&overlay, driver.container("driver"));
    let executor_env = env_of(&overlay, executor.container("executor"));
    let verify_env = env_of(&example, verify.only_container());
    let region = &driver_env["AWS_REGION"];
    assert!(!region.is_empty());
    assert_eq!(&executor_env["AWS_REGION"], region, "executors' region");
    assert_eq!(&verify_env["AWS_REGION"], region, "the verify Job's region");
    let root = &driver_env["SLUICE_CHECKPOINT_ROOT"];
    assert_eq!(
        bucket_of(&verify_env["SINK"]),
        bucket_of(root),
        "the example's sink is in the overlay's bucket"
    );
}

/// What `kubectl -n sluice create secret generic sluice-s3
/// --from-literal=...` creates, with moto's keys.
fn moto_secret(s3: &S3) -> Manifests {
    let env: BTreeMap<String, String> = s3.env().into_iter().collect();
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": "sluice"},
        "type": "Opaque",
        "stringData": {
            "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        },
    });
    Manifests {
        objects: vec![secret],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_overlay_runs_the_example_query_exactly_once() {
    let cluster = Cluster::new("manifests-s3");
    let s3 = S3::start(&cluster, "moto", false).await;
    let pki_parent = cluster.root().join("secrets");
    let manifests = render(S3_OVERLAY)
        .with(render(EXAMPLE_S3))
        .with(moto_secret(&s3))
        .with(readme_secrets(&pki_parent));
    let plan = LocalPlan::new(manifests, &cluster.root().join("k8s"), |w| {
        if w.kind == "Job" { 1 } else { w.replicas }
    });
    assert!(
        plan.shared.is_empty(),
        "no shared volume: {:?}",
        plan.shared
    );
    let counts = ["etcd", "sluice-driver", "sluice-executor"].map(|w| plan.pods_of(w).len());
    assert_eq!(counts, [3, 2, 3], "etcd members, drivers, executors");

    // The bucket of the checkpoint root, on moto; the pods reach moto where
    // they would reach S3.
    let driver_pod = plan.pods_of("sluice-driver")[0];
    let driver_cmd = plan.command(driver_pod, driver_pod.workload.container("driver"));
    let root = driver_cmd.var("SLUICE_CHECKPOINT_ROOT").to_string();
    s3.create_bucket(bucket_of(&root)).await;
    let endpoint: Vec<(String, String)> = s3
        .env()
        .into_iter()
        .filter(|(k, _)| k == "AWS_ENDPOINT_URL" || k == "AWS_ALLOW_HTTP")
        .collect();
    let moto_env: BTreeMap<String, String> = s3.env().into_iter().collect();
    for (workload, container) in [("sluice-driver", "driver"), ("sluice-executor", "executor")] {
        for pod in plan.pods_of(workload) {
            let cmd = plan.command(pod, pod.workload.container(container));
            assert_eq!(
                cmd.var("AWS_ACCESS_KEY_ID"),
                moto_env["AWS_ACCESS_KEY_ID"],
                "{}: the key comes from the Secret",
                pod.name()
            );
            assert!(!cmd.var("AWS_REGION").is_empty(), "{}", pod.name());
        }
    }

    let _etcd = start_etcd(&cluster, &plan).await;
    let drivers = start(
        &cluster,
        &plan,
        "sluice-driver",
        "driver",
        DRIVER,
        &endpoint,
    );
    let readiness = &driver_pod.workload.container("driver")["readinessProbe"];
    wait_one_ready(&drivers, readiness).await;
    let _executors = start(
        &cluster,
        &plan,
        "sluice-executor",
        "executor",
        EXECUTOR,
        &endpoint,
    );

    // The example Jobs, applied together, as in manifests_run.rs.
    let submit_pod = plan.pods_of("example-s3-submit")[0];
    let verify_pod = plan.pods_of("example-s3-verify")[0];
    let submit = plan.command(submit_pod, submit_pod.workload.only_container());
    let mut verify = plan.command(verify_pod, verify_pod.workload.only_container());
    verify.set_env(&endpoint);
    let query = verify.var("QUERY").to_string();
    let sink = verify.var("SINK").to_string();
    let total: u64 = verify.var("TOTAL_ROWS").parse().unwrap();
    assert_eq!(
        verify.var("AWS_ACCESS_KEY_ID"),
        moto_env["AWS_ACCESS_KEY_ID"]
    );
    let took = submit_and_verify(&cluster, "example-s3", &submit, &verify).await;
    eprintln!("the query on S3 finished and verified in {:?}", took);

    let drivers_arg = drivers
        .iter()
        .map(|(p, _)| p.local_addr(&Value::from("grpc")))
        .collect::<Vec<_>>()
        .join(",");
    let pki = pki_parent.join("pki");
    let viewer = std::fs::read_to_string(pki.join("viewer.token")).unwrap();
    let tls = ClientTls::from_flags(Some(pki.join("ca.pem")), None, None).unwrap();
    let status = Client::secured(&drivers_arg, &tls, Some(viewer.trim()))
        .wait_state(&query, QueryState::Finished, Duration::from_secs(10))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    assert_exactly_once_at(&s3.stores(), &sink, total).await;

    // The checkpoint is in the bucket; nothing local held one.
    let checkpoints = s3.stores().open(&root).unwrap();
    let metadata = Key::from(format!("{QUERIES_DIR}/{query}/{}", Record::Metadata.rel()));
    assert!(
        checkpoints.get(&metadata).await.unwrap().is_some(),
        "{root}/queries/{query}/metadata is on S3"
    );
    assert!(!plan.root.join("pvc").exists());
}
