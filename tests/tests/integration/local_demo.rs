//! `sluice local`, as `scripts/demo` runs it: the screen (stdout and stderr,
//! not a terminal here) shows the startup lines and one plain progress line
//! per committed batch, and no log line; the logs go to the file under
//! `--dir` whose path it prints; SIGTERM stops it cleanly.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sluice_tests::Cluster;
use sluice_tests::bins::{CLI, bin};
use sluice_tests::ports::free_addr;

/// Waits until the combined output holds `n` progress lines of the demo query.
async fn wait_for_batches(log: &PathBuf, n: usize, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let screen = std::fs::read_to_string(log).unwrap_or_default();
        if screen
            .lines()
            .filter(|l| l.starts_with("demo batch"))
            .count()
            >= n
        {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "no {n} progress lines within {timeout:?}; the screen:\n{screen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_demo_screen_shows_progress_and_the_logs_go_to_a_file() {
    let cluster = Cluster::new("local-demo");
    let dir = cluster.root().join("sluice-data");
    let http = free_addr();
    let local = cluster.spawn_with_env(
        "local",
        &bin(CLI),
        vec![
            "local".into(),
            "--dir".into(),
            dir.to_str().unwrap().into(),
            "--listen".into(),
            free_addr(),
            "--http".into(),
            http.clone(),
        ],
        vec![("SLUICE_LOG".into(), "debug".into())],
    );
    let screen = wait_for_batches(&local.log_path(), 3, Duration::from_secs(60)).await;

    // The screen names the web UI, and the UI is served there.
    assert!(
        screen.contains(&format!("web UI:     http://{http}/")),
        "the web UI's URL is not printed:\n{screen}"
    );
    let (status, page) = sluice_tests::http::get(&http, "/", Duration::from_secs(10))
        .await
        .expect("GET / of the web UI");
    let page = String::from_utf8_lossy(&page);
    assert!(
        status == 200 && page.contains("<title>Sluice"),
        "GET http://{http}/ gave {status}:\n{page}"
    );

    let log_file = dir.join("sluice-local.log");
    assert!(
        screen.contains(&format!("logs:       {}", log_file.display())),
        "the log file's path is not printed:\n{screen}"
    );
    for line in screen.lines() {
        for level in ["TRACE", "DEBUG", " INFO", " WARN", "ERROR"] {
            assert!(
                !line.contains(level),
                "a log line on the screen: {line:?}\n{screen}"
            );
        }
    }
    let batches: Vec<&str> = screen
        .lines()
        .filter(|l| l.starts_with("demo batch"))
        .collect();
    assert!(
        batches
            .iter()
            .all(|l| l.contains("rows") && l.contains("epoch")),
        "{batches:?}"
    );

    // SLUICE_LOG=debug reaches the file.
    let logs = std::fs::read_to_string(&log_file).expect("the log file exists");
    assert!(logs.contains(" INFO "), "no INFO line in the log file");
    assert!(logs.contains("DEBUG"), "SLUICE_LOG=debug did not apply");
    assert!(!logs.contains('\u{1b}'), "colour codes in the log file");

    local.term();
    let status = local
        .wait_exit(Duration::from_secs(20))
        .await
        .expect("sluice local ignored SIGTERM");
    assert!(status.success(), "sluice local exited with {status}");
    let screen = std::fs::read_to_string(local.log_path()).unwrap();
    assert!(screen.contains("shutting down"), "{screen}");
}
