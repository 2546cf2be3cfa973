//! A client that floods the driver with streams or sends a huge message
//! cannot take it down: the message is refused with `OUT_OF_RANGE` before
//! it is buffered, streams beyond the per-connection limit wait, and the
//! driver goes on answering other clients and running its query.

use std::time::Duration;

use sluice_proto::{ProgressRequest, SubmitRequest};
use sluice_tests::{Client, Cluster, Spec};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams_and_a_100_mb_message() {
    let cluster = Cluster::new("limits");
    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = Client::new(driver.addr());
    let spec = Spec::new("slow", &cluster.sink_path("slow"))
        .partitions(1)
        .rows_per_second(20);
    client.submit(&spec.to_yaml()).await.unwrap();
    client
        .wait_committed("slow", 0, Duration::from_secs(30))
        .await;

    // 100 MB in one Submit.
    let huge = "x".repeat(100 << 20);
    let e = client
        .rpc()
        .max_encoding_message_size(usize::MAX)
        .submit(SubmitRequest {
            spec_text: huge,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("limit is: 2097152"), "{e:?}");

    // 1,000 progress streams on one connection, all held open.
    let rpc = client.rpc();
    let streams: Vec<_> = (0..1000)
        .map(|_| {
            let mut rpc = rpc.clone();
            tokio::spawn(async move {
                let request = ProgressRequest {
                    query: "slow".into(),
                    follow: true,
                };
                let mut stream = rpc.progress(request).await?.into_inner();
                while stream.message().await?.is_some() {}
                Ok::<_, tonic::Status>(())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Another client is still served promptly while they are open.
    let started = std::time::Instant::now();
    let mut other = Client::new(driver.addr());
    let list = tokio::time::timeout(Duration::from_secs(10), other.list()).await;
    assert!(matches!(list, Ok(Ok(_))), "list while flooded: {list:?}");
    let took = started.elapsed();
    // The query goes on committing. (The flooding connection itself waits
    // for a free stream: it is the one that is throttled.)
    let before = other.get("slow").await.unwrap().last_committed_batch;
    other
        .wait_committed("slow", before + 2, Duration::from_secs(30))
        .await;
    for s in &streams {
        s.abort();
    }
    assert!(driver.is_running(), "the driver died");
    assert!(driver.is_ready().await, "the driver is not ready");
    eprintln!("list answered in {took:?} with 1000 streams open");
}
