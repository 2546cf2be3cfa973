//! Failed authentications are limited per peer and logged aggregated: a
//! flood of bad tokens (gRPC) or bad sign-ins (web UI) is answered with
//! "too many failed authentications" once a peer passes its burst, the
//! driver's log holds a few summary lines rather than one per call, and a
//! good token works again once the peer's budget refills.

use std::time::{Duration, Instant};

use sluice_tests::secure::ALL;
use sluice_tests::{Client, Cluster, DriverOpts, Pki, READY_TIMEOUT, http};
use tonic::Code;

const FLOOD: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_slowed_per_peer_and_logged_aggregated() {
    let cluster = Cluster::new("auth-failures");
    let pki = Pki::init(&cluster);
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(ALL),
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;

    let mut guesser = Client::secured(driver.addr(), &pki.client_tls(), Some("guess-0123456789"));
    let mut slowed = 0;
    for _ in 0..FLOOD {
        let e = guesser.list().await.expect_err("a guessed token");
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        if e.message().contains("too many failed authentications") {
            slowed += 1;
        }
    }
    assert!(
        slowed >= FLOOD - 40,
        "only {slowed} of {FLOOD} guesses were slowed"
    );

    let addr = driver.http_addr().to_string();
    let mut refused = 0;
    for _ in 0..FLOOD {
        let (code, _) =
            http::post_json(&addr, "/ui/api/login", &[], "guess", Duration::from_secs(5))
                .await
                .unwrap();
        assert!(code == 401 || code == 429, "{code}");
        refused += usize::from(code == 429);
    }
    assert!(
        refused >= FLOOD - 40,
        "only {refused} of {FLOOD} sign-ins were slowed"
    );

    let log = std::fs::read_to_string(driver.process().log_path()).unwrap();
    let lines = log
        .lines()
        .filter(|l| l.contains("failed authentications from one peer"))
        .count();
    assert!(
        (1..=6).contains(&lines),
        "{lines} log lines for {} failures",
        2 * FLOOD
    );
    assert!(!log.contains("guess-0123456789"), "a token reached the log");

    // The peer's budget refills: a good token works again.
    let mut admin = Client::secured(driver.addr(), &pki.client_tls(), Some(&pki.token("admin")));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match admin.list().await {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline && e.message().contains("too many failed"),
                "{e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
