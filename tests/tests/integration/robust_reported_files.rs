//! An executor's word is checked. Here the executor sees the sink through a
//! mount of its own (a private tmpfs over the sink directory, as a pod with
//! a wrong volume would): it writes its part files and reports them, but
//! the driver cannot find them. The driver checks every reported file
//! before it writes a manifest, so the query fails naming the file, and no
//! manifest or commit lists data that readers would not find.
//!
//! Needs root, for the mount namespace; skipped otherwise.

use std::time::Duration;

use sluice_tests::bins::{CLI, EXECUTOR, bin};
use sluice_tests::{Cluster, QueryState, Spec, files_under};

/// Whether this process runs as root (effective uid 0).
fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_the_driver_cannot_see_fail_the_query_naming_them() {
    if !is_root() {
        eprintln!("skipped: a private mount namespace needs root");
        return;
    }
    let cluster = Cluster::new("reported");
    let driver = cluster.start_ready_driver().await;
    let sink = cluster.sink_path("q");
    std::fs::create_dir_all(&sink).unwrap();
    let script = format!(
        "mount -t tmpfs tmpfs {sink} && exec {exe} {EXECUTOR} --driver {driver} --id blind --heartbeat-ms 200",
        sink = sink.display(),
        exe = bin(CLI).display(),
        driver = driver.addr(),
    );
    let _executor = cluster.spawn(
        "blind-executor",
        std::path::Path::new("/usr/bin/unshare"),
        vec![
            "--mount".into(),
            "--propagation".into(),
            "private".into(),
            "sh".into(),
            "-c".into(),
            script,
        ],
    );
    let spec = Spec::new("q", &sink).partitions(2).total_rows(1000);
    let mut client = cluster.client(driver.addr());
    client.submit(&spec.to_yaml()).await.expect("submit");

    let status = client
        .wait_state("q", QueryState::Failed, Duration::from_secs(60))
        .await;
    assert!(
        status.error.contains("part-00000000000000000000-0000") && status.error.contains("missing"),
        "the error names the missing file: {status:#?}"
    );
    assert_eq!(status.last_committed_batch, -1, "{status:#?}");
    let manifests = files_under(&sink.join("_sluice"));
    assert!(
        manifests.is_empty(),
        "a manifest was written: {manifests:?}"
    );
}
