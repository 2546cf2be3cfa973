//! Each query's state has its own budget. Two queries whose states each
//! fit under an executor's `--max-state-bytes`, but not together, both run
//! on: the executor drops the other's state from memory (to be reloaded
//! from storage) rather than failing either. A query whose state passes
//! its own spec's `max_state_bytes` fails, naming itself and the field,
//! while the others run on.

use std::time::Duration;

use sluice_tests::{Cluster, ExecutorOpts, QueryState, Spec};

/// 2,000 groups in one state partition: a state of a fixed size.
fn fixed(name: &str, cluster: &Cluster) -> Spec {
    Spec::new(name, &cluster.sink_path(name))
        .rows_per_second(4_000)
        .sql("SELECT value % 2000 AS k, count(*) AS n FROM input GROUP BY value % 2000")
        .with("state_partitions: 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_querys_state_never_fails_another() {
    let cluster = Cluster::new("state-budget");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let mut client = cluster.client(&drivers);

    // The size of one query's state, measured on an unbounded executor.
    let probe = cluster.start_executor(&drivers);
    client
        .submit(&fixed("a", &cluster).to_yaml())
        .await
        .expect("submit a");
    let sized = client
        .wait_for(
            "a",
            "holding its 2,000 groups",
            Duration::from_secs(60),
            |s| {
                s.latest_progress
                    .as_ref()
                    .is_some_and(|p| p.state_rows_total == 2_000)
            },
        )
        .await;
    let one = sized.latest_progress.unwrap().state_bytes;
    probe.process().kill();

    // Room for one such state and a half, not for two.
    let limit = one * 3 / 2;
    let _executor = cluster.start_executor_with(
        &drivers,
        ExecutorOpts {
            extra_args: vec!["--max-state-bytes".into(), limit.to_string()],
            ..ExecutorOpts::default()
        },
    );
    client
        .submit(&fixed("b", &cluster).to_yaml())
        .await
        .expect("submit b");
    let capped = Spec::new("capped", &cluster.sink_path("capped"))
        .rows_per_second(4_000)
        .sql("SELECT value AS k, count(*) AS n FROM input GROUP BY value")
        .with("state_partitions: 1")
        .with(&format!("max_state_bytes: {}", one / 2));
    client
        .submit(&capped.to_yaml())
        .await
        .expect("submit capped");

    let failed = client
        .wait_state("capped", QueryState::Failed, Duration::from_secs(60))
        .await;
    for w in [
        "query capped".to_string(),
        format!("max_state_bytes {}", one / 2),
    ] {
        assert!(failed.error.contains(&w), "no {w:?} in {failed:#?}");
    }
    for name in ["a", "b"] {
        let now = client.get(name).await.expect("get").last_committed_batch;
        let later = client
            .wait_committed(name, now + 10, Duration::from_secs(60))
            .await;
        let status = client.get(name).await.expect("get");
        assert_eq!(status.state, QueryState::Running as i32, "{status:#?}");
        assert!(later >= now + 10, "{name}: {status:#?}");
    }
}
