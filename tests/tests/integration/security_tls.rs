//! TLS and mutual TLS on the driver's gRPC port, with real processes and
//! the certificates of `sluice certs init`: every refusal with its status
//! code and message, an executor that is refused is never given a task, and
//! a rotated certificate is served without a restart.

use std::time::Duration;

use sluice_common::tls::ClientTls;
use sluice_tests::secure::{ALL, Secure};
use sluice_tests::{Cluster, DriverOpts, ExecutorOpts, Pki, READY_TIMEOUT, Spec};
use tonic::Code;

fn secured_driver(cluster: &Cluster, pki: &Pki, secure: Secure) -> sluice_tests::Driver {
    cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(secure),
        ..Default::default()
    })
}

/// The first error line the CLI printed.
fn cli_error(out: &sluice_tests::CliOutput) -> String {
    out.stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_wrong_ca_clients_are_refused() {
    let cluster = Cluster::new("tls-refusals");
    let pki = Pki::init(&cluster);
    let driver = secured_driver(&cluster, &pki, ALL);
    driver.wait_ready(READY_TIMEOUT).await;
    let admin = pki.cli_args("admin");

    // A plaintext client of a TLS driver.
    let err = sluice_tests::Client::new(driver.addr())
        .rpc()
        .list(sluice_proto::ListQueriesRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert_eq!(
        err.message(),
        "this driver takes TLS connections only: connect with https:// and --tls-ca"
    );
    let out = cluster
        .cli(driver.addr(), &["--token", &pki.token("admin"), "list"])
        .await;
    out.assert_failure();
    let e = cli_error(&out);
    assert_eq!(
        e,
        "error: this driver takes TLS connections only: connect with https:// and --tls-ca"
    );

    // A client that trusts another CA.
    let (other_ca, _, _) = pki.foreign("stranger", "admin");
    let tls = ClientTls::from_flags(Some(other_ca.clone().into()), None, None).unwrap();
    let err = sluice_tests::Client::secured(driver.addr(), &tls, Some(&pki.token("admin")))
        .rpc()
        .list(sluice_proto::ListQueriesRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let out = cluster
        .cli(
            driver.addr(),
            &[
                "--tls-ca",
                &other_ca,
                "--token",
                &pki.token("admin"),
                "list",
            ],
        )
        .await;
    out.assert_failure();
    let e = cli_error(&out);
    assert!(
        e.contains("UnknownIssuer") && e.contains("check --tls-ca"),
        "{e}"
    );

    // A driver whose own certificate has expired.
    let (old, old_key) = pki.issue("old-driver", "server", true);
    // (Its own checkpoint root: a second standalone driver on the same one
    // would take over from the first.)
    let stale = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--tls-cert".into(), old, "--tls-key".into(), old_key],
        checkpoint_root: Some(cluster.root().join("stale").display().to_string()),
        ..Default::default()
    });
    stale.wait_ready(READY_TIMEOUT).await;
    let err = sluice_tests::Client::secured(stale.addr(), &pki.client_tls(), None)
        .rpc()
        .list(sluice_proto::ListQueriesRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let out = cluster
        .cli(stale.addr(), &["--tls-ca", &pki.file("ca.pem"), "list"])
        .await;
    out.assert_failure();
    let e = cli_error(&out);
    assert!(
        e.contains("invalid peer certificate: certificate expired")
            && e.contains("the driver's certificate has expired"),
        "{e}"
    );

    // The right CA and token.
    let mut args: Vec<&str> = admin.iter().map(String::as_str).collect();
    args.push("list");
    cluster.cli(driver.addr(), &args).await.assert_success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_without_a_good_certificate_get_no_task() {
    let cluster = Cluster::new("tls-executors");
    let pki = Pki::init(&cluster);
    let driver = secured_driver(&cluster, &pki, ALL);
    driver.wait_ready(READY_TIMEOUT).await;
    let ca = pki.file("ca.pem");
    let (expired, expired_key) = pki.issue("old-executor", "executor", true);
    let (_, foreign, foreign_key) = pki.foreign("foreign-executor", "executor");
    let (viewer, viewer_key) = pki.issue("viewer-cert", "viewer", false);
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "no-cert",
            vec!["--tls-ca".into(), ca.clone()],
            "Attach needs a client certificate signed by the driver's --client-ca",
        ),
        (
            "no-cert-token",
            vec![
                "--tls-ca".into(),
                ca.clone(),
                "--token".into(),
                pki.token("executor"),
            ],
            "Attach needs a client certificate",
        ),
        (
            "expired",
            vec![
                "--tls-ca".into(),
                ca.clone(),
                "--tls-cert".into(),
                expired,
                "--tls-key".into(),
                expired_key,
            ],
            "the client certificate is refused: it has expired",
        ),
        (
            "foreign",
            vec![
                "--tls-ca".into(),
                ca.clone(),
                "--tls-cert".into(),
                foreign,
                "--tls-key".into(),
                foreign_key,
            ],
            "the client certificate is refused: it is not signed by the driver's --client-ca",
        ),
        (
            "viewer-ou",
            vec![
                "--tls-ca".into(),
                ca.clone(),
                "--tls-cert".into(),
                viewer,
                "--tls-key".into(),
                viewer_key,
            ],
            "Attach needs the executor role; the caller (certificate \"CN=viewer-cert, OU=viewer\") has the viewer role",
        ),
    ];
    let mut executors = Vec::new();
    for (id, args, _) in &cases {
        executors.push(cluster.start_executor_with(
            driver.addr(),
            ExecutorOpts {
                id: Some(id.to_string()),
                extra_args: args.clone(),
                ..Default::default()
            },
        ));
    }
    let admin = pki.cli_args("admin");
    let spec = Spec::new("tls-q", &cluster.sink_path("tls-q"))
        .partitions(2)
        .rows_per_second(400)
        .total_rows(200);
    let spec = cluster.write_spec(&spec.to_yaml());
    let mut args: Vec<&str> = admin.iter().map(String::as_str).collect();
    args.extend(["submit", spec.to_str().unwrap()]);
    cluster.cli(driver.addr(), &args).await.assert_success();

    // Each refused executor says why, in its own log, with the status code.
    for ((id, _, message), executor) in cases.iter().zip(&executors) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(executor.log_path()).unwrap_or_default();
            if log.contains(message) {
                // The executor logs the status code's description.
                let code = if message.contains("role") {
                    tonic::Code::PermissionDenied.description()
                } else {
                    tonic::Code::Unauthenticated.description()
                };
                assert!(log.contains(code), "{id}: {log}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id}: no refusal {message:?} in:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Every one was refused. They go on retrying from this test's address,
    // and each refusal spends that address's budget of failed
    // authentications (driver/src/auth/failures.rs: 20 at once, then 2 a
    // second), which the client below shares: stop them, and let the
    // budget refill before the client asks.
    drop(executors);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // None of them ever attached, so the query made no progress.
    let mut client =
        sluice_tests::Client::secured(driver.addr(), &pki.client_tls(), Some(&pki.token("viewer")));
    let info = client.cluster_info().await.unwrap();
    assert!(info.executors.is_empty(), "{:?}", info.executors);
    let status = client.get("tls-q").await.unwrap();
    assert_eq!(status.last_committed_batch, -1, "{status:?}");

    // An executor with the real certificate runs the query to the end.
    let _good = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            id: Some("good".into()),
            extra_args: pki.executor_args(ALL),
            ..Default::default()
        },
    );
    client
        .wait_state(
            "tls-q",
            sluice_tests::QueryState::Finished,
            Duration::from_secs(60),
        )
        .await;
    sluice_tests::assert_exactly_once(&cluster.sink_path("tls-q"), 200).await;
}
