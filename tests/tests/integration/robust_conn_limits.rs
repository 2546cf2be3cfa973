//! A flood of idle sockets (slowloris) cannot take the driver's file
//! descriptors: with a 256-descriptor limit and more idle sockets than
//! that on its HTTP and plaintext gRPC ports, each port holds at most its
//! cap, a
//! running query goes on committing (its checkpoint writes find
//! descriptors), nothing logs "Too many open files", and both ports answer
//! new connections once the flood ends.

use std::time::{Duration, Instant};

use sluice_tests::{Cluster, DriverOpts, QueryState, READY_TIMEOUT, Spec, http};
use tokio::net::TcpStream;

const FLOOD_PER_PORT: usize = 350;
/// The driver's limit on open files: each port serves 16 connections
/// (the least), and holds about 128 more in its backlog.
const LIMIT: u64 = 256;

async fn flood(addr: &str) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..FLOOD_PER_PORT {
        // The kernel completes a connection that the driver has not
        // accepted yet: connecting never waits for the driver.
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
            Ok(Ok(s)) => held.push(s),
            _ => break,
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_socket_floods_leave_the_driver_its_descriptors() {
    let cluster = Cluster::new("conn-limits");
    let driver = cluster.start_driver_with(DriverOpts {
        max_open_files: Some(LIMIT),
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let spec = Spec::new("steady", &cluster.sink_path("steady"));
    client.submit(&spec.to_yaml()).await.expect("submit");
    let before = client
        .wait_committed("steady", 0, Duration::from_secs(60))
        .await;

    let http_flood = flood(driver.http_addr()).await;
    let grpc_flood = flood(&drivers).await;
    assert!(
        (http_flood.len() + grpc_flood.len()) as u64 > LIMIT,
        "the flood holds {} sockets",
        http_flood.len() + grpc_flood.len()
    );
    // The client's connection predates the flood: it goes on working.
    let during = client
        .wait_committed("steady", before + 20, Duration::from_secs(60))
        .await;
    let status = client.get("steady").await.expect("get during the flood");
    assert_eq!(status.state, QueryState::Running as i32, "{status:#?}");
    assert!(status.error.is_empty(), "{status:#?}");
    assert!(during >= before + 20);
    drop(http_flood);
    drop(grpc_flood);

    let deadline = Instant::now() + Duration::from_secs(30);
    while http::status(driver.http_addr(), "/healthz").await != Ok(200) {
        assert!(
            Instant::now() < deadline,
            "/healthz never answered after the flood"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The flood's closed sockets may still fill the accept queue for a
    // moment: a new connection must get through before the deadline.
    let listed = loop {
        match cluster.client(&drivers).list().await {
            Ok(listed) => break listed,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no new gRPC connection after the flood: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(listed.len(), 1);
    let log = std::fs::read_to_string(driver.process().log_path()).unwrap();
    assert!(
        !log.contains("Too many open files"),
        "the driver ran out of descriptors"
    );
    assert!(driver.process().is_running());
}
