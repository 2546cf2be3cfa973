//! `sluice local`, as `scripts/demo` runs it: the screen (stdout and stderr,
//! not a terminal here) shows the startup lines, the web UI's URL (which
//! serves the UI), commands to try (which work as printed), one plain
//! progress line per committed batch and, after it, the 10-second windows
//! that batch finalised, and no log line; the logs go to the file under
//! `--dir` whose path it prints; SIGTERM stops it cleanly, and a second run
//! resumes the same query.
//!
//! The windows are checked against DataFusion over the same rate rows: on
//! each run's screen each window appears once and is the oracle's, and the
//! sink holds every window the last committed watermark closed, once.

use sluice_common::checkpoint::Record;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::bins::{CLI, bin};
use sluice_tests::oracle::{expected, rate_input, rate_start_ms};
use sluice_tests::ports::free_addr;
use sluice_tests::stateful::batches;
use sluice_tests::{Cluster, Process, commit_epochs, http, offset_records, query_dir};

const QUERY: &str = "demo";
const WAIT: Duration = Duration::from_secs(90);
const T: Duration = Duration::from_secs(10);
/// The demo's windows, computed in one piece without Sluice's `window()`.
const ORACLE: &str = "SELECT date_bin(INTERVAL '10 seconds', timestamp_ms) AS start, count(*) AS n, min(value) AS min_value, max(value) AS max_value, avg(value) AS avg_value FROM input GROUP BY 1";

/// One window: its start and end (ms), rows, lowest, highest and mean value.
#[derive(Debug, Clone, PartialEq)]
struct Window {
    start: i64,
    end: i64,
    n: u64,
    min: i64,
    max: i64,
    avg: f64,
}

/// The UTC time of day of `ms`, `HH:MM:SS`, as the screen names windows.
fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A window as a screen line shows it, or as the oracle's row would.
fn shown(w: &Window) -> String {
    format!(
        "demo window {}-{} UTC  rows {}  values {}..{}  avg {}",
        clock(w.start),
        clock(w.end),
        w.n,
        w.min,
        w.max,
        w.avg
    )
}

fn field<'a>(v: &'a serde_json::Value, key: &str, row: &str) -> &'a serde_json::Value {
    v.get(key).unwrap_or_else(|| panic!("no {key} in {row}"))
}

/// A JSON number, or one the normalized sink rows hold as a string.
fn number<T: std::str::FromStr>(v: &serde_json::Value) -> T {
    let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
    text.parse()
        .unwrap_or_else(|_| panic!("not a number: {text}"))
}

/// A row of the sink (normalized: every value a string) or of the oracle
/// (`start` in place of the window `w`).
fn window(row: &str) -> Window {
    let v: serde_json::Value = serde_json::from_str(row).expect("a JSON row");
    let (start, end) = match v.get("w") {
        Some(w) => {
            let w: serde_json::Value =
                serde_json::from_str(w.as_str().expect("a window")).expect("a window object");
            (
                number(field(&w, "start", row)),
                number(field(&w, "end", row)),
            )
        }
        None => {
            let start: i64 = number(field(&v, "start", row));
            (start, start + 10_000)
        }
    };
    Window {
        start,
        end,
        n: number(field(&v, "n", row)),
        min: number(field(&v, "min_value", row)),
        max: number(field(&v, "max_value", row)),
        avg: number(field(&v, "avg_value", row)),
    }
}

/// The batch ids and the window lines the screen shows.
fn screen_parts(screen: &str) -> (BTreeSet<u64>, Vec<&str>) {
    let batches = screen
        .lines()
        .filter_map(|l| l.strip_prefix("demo batch "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    let windows = screen
        .lines()
        .filter(|l| l.starts_with("demo window "))
        .collect();
    (batches, windows)
}

/// Waits until the screen of `process` holds `batches` progress lines and
/// `windows` window lines, and `more` holds; returns it.
async fn wait_for(
    process: &Process,
    (batches, windows): (usize, usize),
    more: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let screen = std::fs::read_to_string(process.log_path()).unwrap_or_default();
        let (b, w) = screen_parts(&screen);
        if b.len() >= batches && w.len() >= windows && more(&screen) {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "no {batches} batches and {windows} windows within {WAIT:?}; the screen:\n{screen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn start_local(cluster: &Cluster, name: &str, dir: &Path, listen: &str, http: &str) -> Process {
    let args = [
        "local",
        "--dir",
        dir.to_str().unwrap(),
        "--listen",
        listen,
        "--http",
        http,
    ];
    cluster.spawn_with_env(
        name,
        &bin(CLI),
        args.iter().map(|a| a.to_string()).collect(),
        vec![("SLUICE_LOG".into(), "debug".into())],
    )
}

/// Stops `process` with SIGTERM; returns its whole screen.
async fn stop(process: &Process) -> String {
    process.term();
    let status = process
        .wait_exit(Duration::from_secs(20))
        .await
        .expect("sluice local ignored SIGTERM");
    assert!(status.success(), "sluice local exited with {status}");
    let screen = std::fs::read_to_string(process.log_path()).unwrap();
    assert!(screen.contains("shutting down"), "{screen}");
    screen
}

/// The screen names the web UI, which serves the UI page and the demo.
async fn assert_the_ui_is_served(screen: &str, http_addr: &str) {
    let url = format!("  web UI:     http://{http_addr}/");
    assert!(screen.contains(&url), "no {url:?} on the screen:\n{screen}");
    let (code, page) = http::get(http_addr, "/", T).await.expect("GET /");
    let page = String::from_utf8_lossy(http::body(&page)).into_owned();
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<title>Sluice</title>"), "{page}");
    let (code, overview) = http::get(http_addr, "/ui/api/overview", T).await.unwrap();
    let overview = String::from_utf8_lossy(&overview).into_owned();
    assert_eq!(code, 200, "{overview}");
    assert!(overview.contains("\"demo\""), "{overview}");
}

/// The commands the screen suggests name the driver and work as printed.
async fn assert_the_commands_work(screen: &str, listen: &str, cwd: &Path) {
    let suffix = format!(" --driver {listen}");
    let commands: Vec<&str> = screen
        .lines()
        .skip_while(|l| *l != "try, from another terminal:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert_eq!(commands.len(), 3, "{screen}");
    for (c, what) in commands
        .iter()
        .zip(["status demo", "progress demo --follow", "list"])
    {
        assert!(c.ends_with(&format!(" {what}{suffix}")), "{c:?}");
    }
    let words: Vec<&str> = commands[0].split_whitespace().collect();
    let out = tokio::process::Command::new(words[0])
        .args(&words[1..])
        .current_dir(cwd)
        .env_remove("SLUICE_DRIVER")
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", commands[0]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {stdout}", commands[0]);
    assert!(stdout.contains("name: demo\nstate: RUNNING\n"), "{stdout}");
}

/// The screen keeps log lines out, and prints a plain line per batch.
fn assert_no_log_lines(screen: &str) {
    for line in screen.lines() {
        for level in ["TRACE", "DEBUG", " INFO", " WARN", "ERROR"] {
            assert!(
                !line.contains(level),
                "a log line on the screen: {line:?}\n{screen}"
            );
        }
    }
    let (batches, _) = screen_parts(screen);
    assert!(!batches.is_empty(), "{screen}");
    let lines = screen.lines().filter(|l| l.starts_with("demo batch"));
    for l in lines {
        assert!(l.contains("rows") && l.contains("epoch"), "{l}");
    }
}

/// The oracle's windows over the rate rows up to `until_ms` and a little
/// after, by start.
async fn oracle(root: &Path, until_ms: i64) -> BTreeMap<i64, Window> {
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(query_dir(root, QUERY).join(Record::Spec.rel())).unwrap(),
    )
    .unwrap();
    let rps = spec["source"]["rate"]["rows_per_second"].as_u64().unwrap();
    let start = rate_start_ms(root, QUERY);
    let seconds = u64::try_from((until_ms - start) / 1000 + 2).unwrap();
    let rows = expected(ORACLE, rate_input(start, rps, seconds * rps)).await;
    rows.iter()
        .map(|r| window(r))
        .map(|w| (w.start, w))
        .collect()
}

/// Each run's screen shows each window once, as the oracle computes it,
/// and exactly the windows the sink holds for the batches it shows; the
/// sink holds every window the last committed watermark closed, once.
async fn assert_windows(root: &Path, sink: &Path, screens: &[&str]) {
    let committed: BTreeSet<u64> = commit_epochs(root, QUERY).iter().map(|c| c.0).collect();
    let last = *committed.last().expect("a committed batch");
    let watermarks: BTreeMap<u64, i64> = offset_records(root, QUERY)
        .iter()
        .filter_map(|o| Some((o.batch_id, o.watermark_ms?)))
        .collect();
    let closed = watermarks[&last];
    let want = oracle(root, closed).await;
    let mut in_sink: BTreeMap<i64, (u64, Window)> = BTreeMap::new();
    for (batch, rows) in batches(sink).await {
        if !committed.contains(&batch) {
            continue;
        }
        for w in rows.iter().map(|r| window(r)) {
            assert!(
                w.end <= watermarks[&batch],
                "batch {batch} emits {w:?} before its watermark"
            );
            assert_eq!(
                Some(&w),
                want.get(&w.start),
                "batch {batch}: not the oracle's"
            );
            let again = in_sink.insert(w.start, (batch, w));
            assert!(again.is_none(), "{again:?} is emitted twice");
        }
    }
    let closed_windows: Vec<&i64> = want
        .values()
        .filter(|w| w.end <= closed)
        .map(|w| &w.start)
        .collect();
    assert_eq!(
        in_sink.keys().collect::<Vec<_>>(),
        closed_windows,
        "the sink's windows"
    );
    for screen in screens {
        let (shown_batches, lines) = screen_parts(screen);
        let expected: Vec<String> = in_sink
            .values()
            .filter(|(b, _)| shown_batches.contains(b))
            .map(|(_, w)| shown(w))
            .collect();
        assert_eq!(lines, expected, "the screen's windows:\n{screen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_screen_shows_windows_the_ui_and_commands_and_resumes() {
    let cluster = Cluster::new("local-demo");
    let dir = cluster.root().join("sluice-data");
    let (listen, http_addr) = (free_addr(), free_addr());
    let local = start_local(&cluster, "local", &dir, &listen, &http_addr);
    let first = wait_for(&local, (3, 2), |_| true).await;

    let log_file = dir.join("sluice-local.log");
    assert!(
        first.contains(&format!("logs:       {}", log_file.display())),
        "the log file's path is not printed:\n{first}"
    );
    assert!(first.contains("submitted query demo"), "{first}");
    assert!(first.contains("query demo: 10-second windows"), "{first}");
    assert_the_ui_is_served(&first, &http_addr).await;
    assert_the_commands_work(&first, &listen, cluster.root()).await;
    let first = stop(&local).await;
    assert_no_log_lines(&first);

    // SLUICE_LOG=debug reaches the file.
    let logs = std::fs::read_to_string(&log_file).expect("the log file exists");
    assert!(logs.contains(" INFO "), "no INFO line in the log file");
    assert!(logs.contains("DEBUG"), "SLUICE_LOG=debug did not apply");
    assert!(!logs.contains('\u{1b}'), "colour codes in the log file");

    // A second run follows the same query and shows a window the first did not.
    let seen: BTreeSet<String> = screen_parts(&first)
        .1
        .into_iter()
        .map(String::from)
        .collect();
    let again = start_local(&cluster, "local-again", &dir, &listen, &http_addr);
    let newer = |s: &str| screen_parts(s).1.iter().any(|w| !seen.contains(*w));
    wait_for(&again, (1, 1), newer).await;
    let second = stop(&again).await;
    assert!(
        second.contains("query demo already exists in this checkpoint: following it"),
        "{second}"
    );
    assert_no_log_lines(&second);

    let root = dir.join("checkpoints");
    assert_windows(&root, &dir.join("out"), &[&first, &second]).await;
}
