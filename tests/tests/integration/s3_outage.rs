//! The S3 server is SIGKILLed mid-query and restarted with its objects
//! (moto behind a proxy, see `sluice_tests::s3`). While it is down the
//! query stays RUNNING and its status shows the storage error; once the
//! server is back the query resumes and ends FINISHED, exactly-once, as the
//! checker reading the sink on S3 proves.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::{
    Cluster, DriverOpts, ExecutorOpts, QueryState, READY_TIMEOUT, S3, Spec, assert_exactly_once_at,
};

const BUCKET: &str = "sluice";
const TOTAL: u64 = 6000;
/// How long the server stays down.
const OUTAGE: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_rides_out_the_s3_server_being_killed_and_restarted() {
    let cluster = Cluster::new("s3-outage");
    let s3 = S3::start_durable(&cluster, "moto").await;
    s3.create_bucket(BUCKET).await;
    let driver = cluster.start_driver_with(DriverOpts {
        checkpoint_root: Some(format!("s3://{BUCKET}/checkpoint")),
        env: s3.env(),
        ..DriverOpts::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let _executors: Vec<_> = (0..2)
        .map(|_| {
            cluster.start_executor_with(
                driver.addr(),
                ExecutorOpts {
                    env: s3.env(),
                    ..ExecutorOpts::default()
                },
            )
        })
        .collect();
    let sink = format!("s3://{BUCKET}/out");
    let spec = Spec::new("q", Path::new(&sink))
        .partitions(2)
        .rows_per_second(1000)
        .total_rows(TOTAL)
        .interval_ms(100);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");
    let before = client.wait_committed("q", 5, Duration::from_secs(30)).await;

    s3.kill();
    let down = Instant::now();
    let mut seen_error = None;
    while down.elapsed() < OUTAGE {
        let status = client.get("q").await.expect("status while S3 is down");
        assert_eq!(
            status.state,
            QueryState::Running as i32,
            "the query must stay RUNNING while S3 is down: {status:?}"
        );
        if !status.error.is_empty() {
            seen_error = Some(status.error.clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let error = seen_error.expect("the status shows the storage error while S3 is down");
    assert!(
        error.contains("retrying") && error.contains("s3://sluice/"),
        "the error names the location and that it is retried: {error}"
    );
    let stalled = client.get("q").await.unwrap().last_committed_batch;
    eprintln!(
        "S3 down {OUTAGE:?}: committed {before} before, {stalled} at the end; error: {error}"
    );

    s3.restart().await;
    let done = client
        .wait_state("q", QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(
        done.last_committed_batch > stalled,
        "the query went on after the restart: {done:?}"
    );
    assert!(done.error.is_empty(), "the error clears: {done:?}");
    assert_exactly_once_at(&s3.stores(), &sink, TOTAL).await;
}
