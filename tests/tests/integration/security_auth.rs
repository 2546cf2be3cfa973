//! Tokens and roles on the QueryService of a real driver: each refusal with
//! its status code and message, a token never printed in a log, health
//! checks open, a client certificate as a credential, executors attaching
//! with a token where there is no client CA, and rotated files picked up
//! without a restart.

use std::time::Duration;

use sluice_proto::ListQueriesRequest;
use sluice_tests::secure::{ALL, Secure};
use sluice_tests::{Client, Cluster, DriverOpts, ExecutorOpts, Pki, READY_TIMEOUT, Spec};
use tonic::Code;

const SPEC: &str = "name: q\nsource:\n  rate:\n    partitions: 1\n    rows_per_second: 10\nsink:\n  files:\n    path: /tmp/never\n    format: jsonl\n";

fn client(driver: &sluice_tests::Driver, pki: &Pki, token: Option<&str>) -> Client {
    Client::secured(driver.addr(), &pki.client_tls(), token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_roles() {
    let cluster = Cluster::new("auth-roles");
    let pki = Pki::init(&cluster);
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(ALL),
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;

    // No credentials.
    let e = client(&driver, &pki, None).submit(SPEC).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(
        e.message(),
        "Submit needs credentials: a bearer token (--token or SLUICE_TOKEN) or a client \
         certificate signed by the driver's --client-ca"
    );
    // A token the driver does not know; it is never printed.
    let guess = "guessed-token-0123456789";
    let e = client(&driver, &pki, Some(guess)).list().await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::Unauthenticated,
            "the bearer token is not valid for this driver"
        )
    );
    // A viewer reads but may not submit or stop.
    let mut viewer = client(&driver, &pki, Some(&pki.token("viewer")));
    viewer.list().await.unwrap();
    let e = viewer.submit(SPEC).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(
        e.message(),
        "Submit needs the admin role; the caller (token \"viewer\") has the viewer role"
    );
    let e = viewer.stop("q").await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // An executor token is for attaching only.
    let e = client(&driver, &pki, Some(&pki.token("executor")))
        .list()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("List needs the viewer role"), "{e:?}");
    // The admin gets through to the spec check.
    let e = client(&driver, &pki, Some(&pki.token("admin")))
        .submit("name: [")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // The CLI prints the same refusals.
    let out = cluster
        .cli(
            driver.addr(),
            &[
                "--tls-ca",
                &pki.file("ca.pem"),
                "--token",
                &pki.token("viewer"),
                "stop",
                "q",
            ],
        )
        .await;
    out.assert_failure();
    assert!(
        out.stderr.contains("error: Stop needs the admin role"),
        "{out}"
    );
    // A client certificate with OU=admin is a credential too.
    let out = cluster
        .cli(
            driver.addr(),
            &[
                "--tls-ca",
                &pki.file("ca.pem"),
                "--tls-cert",
                &pki.file("client.pem"),
                "--tls-key",
                &pki.file("client-key.pem"),
                "list",
            ],
        )
        .await;
    out.assert_success();

    // Health checks need nothing.
    let channel =
        tonic::transport::Endpoint::from_shared(format!("https://{}", driver.addr())).unwrap();
    let channel = pki
        .client_tls()
        .apply(channel)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // No token, not even the guessed one, reached the log.
    let log = std::fs::read_to_string(driver.log_path()).unwrap();
    for role in ["admin", "viewer", "executor"] {
        assert!(
            !log.contains(&pki.token(role)),
            "the {role} token is in the driver's log"
        );
    }
    assert!(
        !log.contains(guess),
        "a presented token is in the driver's log"
    );
    assert!(
        log.contains("failed authentications from one peer"),
        "failed authentications are logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_attach_with_a_token_without_a_client_ca() {
    let cluster = Cluster::new("auth-executor-token");
    let pki = Pki::init(&cluster);
    let tokens_only = Secure {
        mtls: false,
        tokens: true,
    };
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(tokens_only),
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let viewer_as_executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            id: Some("viewer".into()),
            extra_args: vec![
                "--tls-ca".into(),
                pki.file("ca.pem"),
                "--token".into(),
                pki.token("viewer"),
            ],
            ..Default::default()
        },
    );
    let _executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            id: Some("good".into()),
            extra_args: pki.executor_args(tokens_only),
            ..Default::default()
        },
    );
    let spec = Spec::new("tok", &cluster.sink_path("tok"))
        .partitions(2)
        .rows_per_second(400)
        .total_rows(300);
    let mut admin = client(&driver, &pki, Some(&pki.token("admin")));
    admin.submit(&spec.to_yaml()).await.unwrap();
    admin
        .wait_state(
            "tok",
            sluice_tests::QueryState::Finished,
            Duration::from_secs(60),
        )
        .await;
    sluice_tests::assert_exactly_once(&cluster.sink_path("tok"), 300).await;
    let ids: Vec<String> = admin
        .cluster_info()
        .await
        .unwrap()
        .executors
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, vec!["good".to_string()]);
    let log = std::fs::read_to_string(viewer_as_executor.log_path()).unwrap();
    assert!(
        log.contains(
            "Attach needs the executor role; the caller (token \\\"viewer\\\") has the viewer role"
        ) || log.contains(
            "Attach needs the executor role; the caller (token \"viewer\") has the viewer role"
        ),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_and_tokens_apply_without_a_restart() {
    let cluster = Cluster::new("auth-rotate");
    let pki = Pki::init(&cluster);
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(ALL),
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let admin = pki.token("admin");
    client(&driver, &pki, Some(&admin)).list().await.unwrap();

    // A new server certificate from a new CA replaces the old files.
    let (new_ca, cert, key) = pki.foreign("rotated", "server");
    std::fs::copy(&key, pki.dir().join("driver-key.pem")).unwrap();
    std::fs::copy(&cert, pki.dir().join("driver.pem")).unwrap();
    let new_tls =
        sluice_common::tls::ClientTls::from_flags(Some(new_ca.into()), None, None).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let fresh = Client::secured(driver.addr(), &new_tls, Some(&admin));
        match fresh.rpc().list(ListQueriesRequest {}).await {
            Ok(_) => break,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "the new certificate is not served: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The old CA no longer verifies the driver.
    let e = client(&driver, &pki, Some(&admin))
        .rpc()
        .list(ListQueriesRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");

    // A token file without the admin token: the admin is refused.
    let viewer_only = format!(
        "tokens:\n  - name: viewer\n    role: viewer\n    sha256: {}\n",
        sha256_hex(&pki.token("viewer"))
    );
    std::fs::write(pki.dir().join("tokens.yaml"), viewer_only).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let e = Client::secured(driver.addr(), &new_tls, Some(&admin))
            .rpc()
            .list(ListQueriesRequest {})
            .await;
        match e {
            Err(e) if e.code() == Code::Unauthenticated => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "the old token still works: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(driver.is_running(), "the driver restarted");
    assert_eq!(driver.starts(), 1);
}

/// The hex SHA-256 of a token, as `sluice token new` writes it.
fn sha256_hex(token: &str) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(token.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}
