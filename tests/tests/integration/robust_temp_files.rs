//! No temporary file outlives its use: executors SIGKILLed while writing
//! part files, and a query stopped while its tasks run, leave no hidden
//! file in the sink once the query has committed again (here: finished) or
//! stopped.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::{Cluster, ExecutorOpts, QueryState, Spec, assert_exactly_once};

/// The hidden (temporary) files directly in `sink`.
fn hidden(sink: &Path) -> Vec<String> {
    std::fs::read_dir(sink)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until a part file is being written in `sink`.
async fn wait_for_a_write(sink: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while hidden(sink).is_empty() {
        assert!(Instant::now() < deadline, "no part file was ever in flight");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until `sink` holds no hidden file.
async fn wait_clean(sink: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = hidden(sink);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: left behind {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn big(name: &str, sink: &Path, total: u64) -> Spec {
    // Tasks of 500 k rows: long enough to be caught in the middle.
    Spec::new(name, sink)
        .partitions(2)
        .rows_per_second(1_000_000_000)
        .total_rows(total)
        .max_rows_per_batch(1_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_cancelled_writes_leave_no_temporary_files() {
    let cluster = Cluster::new("temp-files");
    let driver = cluster.start_ready_driver().await;
    let one_slot = || ExecutorOpts {
        slots: 1,
        ..ExecutorOpts::default()
    };
    let executors = [
        cluster.start_executor_with(driver.addr(), one_slot()),
        cluster.start_executor_with(driver.addr(), one_slot()),
    ];
    let mut client = cluster.client(driver.addr());

    // Kills while writing, then the query runs on to the end.
    let total = 4_000_000;
    let sink = cluster.sink_path("killed");
    client
        .submit(&big("killed", &sink, total).to_yaml())
        .await
        .expect("submit");
    for kill in 0..4 {
        wait_for_a_write(&sink).await;
        let victim = &executors[kill % 2];
        victim.process().kill();
        victim.process().restart();
    }
    client
        .wait_state("killed", QueryState::Finished, Duration::from_secs(180))
        .await;
    wait_clean(&sink, "after kills and a finished query").await;
    assert_exactly_once(&sink, total).await;

    // A stop cancels the running tasks mid-write.
    let sink = cluster.sink_path("stopped");
    client
        .submit(&big("stopped", &sink, 40_000_000).to_yaml())
        .await
        .expect("submit");
    wait_for_a_write(&sink).await;
    client.stop("stopped").await.expect("stop");
    client
        .wait_state("stopped", QueryState::Stopped, Duration::from_secs(30))
        .await;
    wait_clean(&sink, "after a stop").await;
}
