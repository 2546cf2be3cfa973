//! `sluice progress QUERY --follow`: on a terminal (a pty made by
//! `script`), one block redrawn in place for each batch, with the batch,
//! the rates, a sparkline of batch durations, the phases and the state;
//! piped, one plain line per batch and no terminal control sequences.

use std::process::Stdio;
use std::time::Duration;

use sluice_tests::bins::bin;
use sluice_tests::stateful::rate_spec;
use sluice_tests::{Cluster, QueryState};

const QUERY: &str = "followed";
const COUNTS: &str = "SELECT value % 7 AS k, count(*) AS n FROM input GROUP BY value % 7";

/// `sluice progress QUERY --follow` with its stdout on a pty: what the
/// terminal received.
async fn on_a_terminal(driver: &str) -> String {
    let command = format!(
        "{} --driver {driver} progress {QUERY} --follow",
        bin("sluice").display()
    );
    let run = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .stdin(Stdio::null())
        .env("TERM", "xterm")
        .env_remove("SLUICE_DRIVER")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("progress --follow on a pty ended")
        .expect("run script");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_redraws_on_a_terminal_and_prints_lines_when_piped() {
    let cluster = Cluster::new("progress-follow");
    let driver = cluster.start_ready_driver().await;
    let _executor = cluster.start_executor(driver.addr());
    let mut client = cluster.client(driver.addr());
    // 12 batches of 500 rows, with state.
    let spec = rate_spec(QUERY, &cluster.sink_path(QUERY), (5000, 6000), COUNTS, &[])
        .replace("max_rows_per_batch: 4000", "max_rows_per_batch: 500");
    client.submit(&spec).await.expect("submit");

    let (screen, piped) = tokio::join!(
        on_a_terminal(driver.addr()),
        cluster.cli(driver.addr(), &["progress", QUERY, "--follow"])
    );
    let status = client
        .wait_state(QUERY, QueryState::Finished, Duration::from_secs(60))
        .await;
    let last = status.last_committed_batch;
    assert!(last >= 11, "{status:?}");

    // The terminal: a block per batch, each after moving up over the last.
    let redraws = screen.matches("\u{1b}[5F").count() + screen.matches("\u{1b}[6F").count();
    let blocks = screen.matches("\u{1b}[J").count();
    assert_eq!(blocks as i64, last + 1, "one block per batch: {screen}");
    assert_eq!(
        redraws,
        blocks - 1,
        "each block replaces the one before: {screen}"
    );
    let final_block = screen.rsplit("\u{1b}[J").next().unwrap();
    let lines: Vec<&str> = final_block.lines().collect();
    let head = format!("{QUERY}  batch {last}  epoch {}  committed ", status.epoch);
    assert!(lines[0].starts_with(&head), "{final_block}");
    assert!(lines[1].starts_with("rows      "), "{final_block}");
    assert!(lines[2].starts_with("duration  "), "{final_block}");
    let bars: String = lines[2]["duration  ".len()..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    assert_eq!(
        bars.chars().count() as i64,
        last + 1,
        "a bar per batch: {bars}"
    );
    assert!(bars.chars().all(|c| "▁▂▃▄▅▆▇█".contains(c)), "{bars}");
    assert!(
        bars.contains('█'),
        "the longest batch has a full bar: {bars}"
    );
    assert!(lines[3].starts_with("phases    offsets "), "{final_block}");
    assert!(
        lines[4].starts_with("state     ") && lines[4].contains(" rows "),
        "{final_block}"
    );
    assert!(
        lines[4].contains("state     7 rows"),
        "7 keys in the state: {final_block}"
    );

    // Piped: plain lines, one per batch.
    piped.assert_success();
    assert!(!piped.stdout.contains('\u{1b}'), "{}", piped.stdout);
    let lines: Vec<&str> = piped.stdout.lines().collect();
    assert_eq!(lines.len() as i64, last + 1, "{}", piped.stdout);
    for (i, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("{QUERY} batch {i:>6}  rows")),
            "{line}"
        );
    }
}
