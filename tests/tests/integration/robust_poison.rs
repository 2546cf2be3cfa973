//! A poison task: every executor that runs it dies (here the test SIGKILLs
//! whichever executor the driver dispatched it to, as an OOM kill would).
//! Each loss counts; `status` shows the count meanwhile; after
//! `--max-task-attempts` losses in a row the query is FAILED, naming the
//! batch, the partition and "executor lost while running this task N times".

use std::time::{Duration, Instant};

use sluice_tests::{Cluster, DriverOpts, ExecutorOpts, QueryState, Spec};

const MAX_ATTEMPTS: u32 = 3;

/// The executor that attempt `attempt` of the query's batch 0, partition 0
/// was dispatched to, from the driver's DEBUG log.
async fn dispatched_to(log: &std::path::Path, query_id: &str, attempt: u32) -> String {
    let task = format!("task={query_id}/0/0/{attempt} ");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text
            .lines()
            .filter(|l| l.contains("task dispatched") && l.contains(&task))
            .find_map(|l| l.split("executor=").nth(1)?.split_whitespace().next());
        if let Some(executor) = found {
            return executor.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "attempt {attempt} never dispatched"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_kills_its_executors_fails_the_query_naming_it() {
    let cluster = Cluster::new("poison");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--max-task-attempts".into(), MAX_ATTEMPTS.to_string()],
        env: vec![(
            "RUST_LOG".into(),
            "info,sluice_driver::cluster::scheduler=debug".into(),
        )],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let executor = cluster.start_executor_with(
        driver.addr(),
        ExecutorOpts {
            id: Some("victim".into()),
            slots: 1,
            ..ExecutorOpts::default()
        },
    );
    // One partition and one large batch: each attempt runs long enough to
    // be killed while it runs.
    let spec = Spec::new("poison", &cluster.sink_path("poison"))
        .partitions(1)
        .rows_per_second(1_000_000_000)
        .total_rows(1_000_000);
    let mut client = cluster.client(driver.addr());
    let id = client.submit(&spec.to_yaml()).await.expect("submit").id;

    for attempt in 0..MAX_ATTEMPTS {
        let target = dispatched_to(&driver.process().log_path(), &id, attempt).await;
        assert_eq!(target, "victim");
        executor.process().kill();
        if attempt + 1 < MAX_ATTEMPTS {
            let lost = attempt + 1;
            let status = client
                .wait_for(
                    "poison",
                    "showing the losses",
                    Duration::from_secs(20),
                    |s| s.error.contains(&format!("{lost} times")),
                )
                .await;
            assert_eq!(status.state, QueryState::Running as i32, "{status:#?}");
            executor.process().restart();
        }
    }
    let status = client
        .wait_state("poison", QueryState::Failed, Duration::from_secs(20))
        .await;
    for part in [
        "batch 0",
        "partition 0",
        &format!("executor lost while running this task {MAX_ATTEMPTS} times"),
    ] {
        assert!(status.error.contains(part), "{part:?} in {status:#?}");
    }
}
