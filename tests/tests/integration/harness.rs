//! Self-test of the harness mechanics that need no Sluice binary: process
//! control and reaping, log files, free ports, `/readyz` polling, the spec
//! builder, the seeded generator and the checkpoint checks.

use sluice_common::checkpoint::Log;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_tests::{Cluster, Driver, Rng, Spec, http, ports};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The state letter of /proc/<pid>/stat (`S`, `R`, `T`, `Z`, ...).
fn proc_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, s)| s).unwrap_or("");
    after.trim_start().chars().next().unwrap_or('?')
}

fn sleeper(cluster: &Cluster, name: &str) -> sluice_tests::Process {
    cluster.spawn(name, Path::new("sleep"), vec!["30".into()])
}

#[tokio::test]
async fn kill_pause_resume_term_restart() {
    let cluster = Cluster::new("harness");
    let p = sleeper(&cluster, "sleeper");
    let pid = p.pid().expect("running");
    assert!(p.is_running() && alive(pid));

    p.pause();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(proc_state(pid), 'T', "SIGSTOP stops the process");
    p.resume();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_ne!(proc_state(pid), 'T', "SIGCONT resumes it");

    assert!(p.wait_exit(Duration::from_millis(100)).await.is_none());
    let status = p.kill().expect("an exit status");
    assert_eq!(status.signal(), Some(9));
    assert!(!p.is_running() && !alive(pid), "killed and reaped");

    p.restart();
    let pid2 = p.pid().expect("running again");
    assert_ne!(pid, pid2);
    assert_eq!(p.starts(), 2);
    assert_eq!(p.args(), vec!["30".to_string()]);
    p.term();
    let status = p.wait_exit(Duration::from_secs(5)).await.expect("exits");
    assert_eq!(status.signal(), Some(15));
    assert!(!alive(pid2));
    let log = std::fs::read_to_string(p.log_path()).unwrap();
    assert_eq!(log.matches("----- harness: start #").count(), 2, "{log}");
}

#[test]
fn drop_kills_and_reaps_even_when_paused() {
    let cluster = Cluster::new("harness");
    let p = sleeper(&cluster, "a");
    let pid = p.pid().unwrap();
    drop(p);
    assert!(!alive(pid), "dropping the handle reaps the child");

    let p = sleeper(&cluster, "b");
    let pid = p.pid().unwrap();
    p.pause();
    drop(p);
    assert!(!alive(pid), "a paused child is reaped too");
}

#[test]
fn cluster_drop_kills_processes_whose_handle_leaked() {
    let cluster = Cluster::new("harness");
    let p = sleeper(&cluster, "leaked");
    let pid = p.pid().unwrap();
    std::mem::forget(p);
    assert!(alive(pid));
    let root = cluster.root().to_path_buf();
    drop(cluster);
    assert!(!alive(pid), "the cluster reaps what it started");
    assert!(!root.exists(), "the temporary directory is removed");
}

#[test]
fn cluster_drop_on_panic_kills_everything() {
    let pid = std::sync::Arc::new(std::sync::Mutex::new(0u32));
    let seen = pid.clone();
    let result = std::thread::spawn(move || {
        let cluster = Cluster::new("harness");
        let p = cluster.spawn(
            "chatty",
            Path::new("sh"),
            vec!["-c".into(), "echo hello-$((40 + 2)); exec sleep 30".into()],
        );
        *seen.lock().unwrap() = p.pid().unwrap();
        for _ in 0..100 {
            if p.log_tail(5).contains("hello-42") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let tails = cluster.log_tails(60);
        assert!(tails.contains("\nhello-42"), "{tails}");
        panic!("deliberate panic to exercise the drop path");
    })
    .join();
    assert!(result.is_err());
    let pid = *pid.lock().unwrap();
    assert!(pid > 0 && !alive(pid));
}

#[test]
fn free_ports_are_unique_and_bindable() {
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let port = ports::free_port();
        assert!(seen.insert(port), "port {port} handed out twice");
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("bindable");
    }
}

#[test]
fn http_status_line_parsing() {
    assert_eq!(
        http::parse_status(b"HTTP/1.1 200 OK\r\n\r\nready"),
        Some(200)
    );
    assert_eq!(
        http::parse_status(b"HTTP/1.0 503 Service Unavailable\r\n"),
        Some(503)
    );
    assert_eq!(http::parse_status(b"HTTP/1.1 404\r\n"), Some(404));
    assert_eq!(http::parse_status(b"SSH-2.0-OpenSSH\r\n"), None);
    assert_eq!(http::parse_status(b"HTTP/1.1 20x OK\r\n"), None);
    assert_eq!(http::parse_status(b""), None);
    assert_eq!(
        http::body(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nready"),
        b"ready"
    );
}

/// Serves `/readyz`: 503 for the first `not_ready` requests, then 200.
async fn fake_readyz(not_ready: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut served = 0;
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let resp: &[u8] = if served < not_ready {
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nready"
            };
            served += 1;
            let _ = s.write_all(resp).await;
        }
    });
    addr
}

#[tokio::test]
async fn readyz_polling_waits_for_200() {
    let addr = fake_readyz(3).await;
    assert_eq!(http::status(&addr, "/readyz").await, Ok(503));
    http::wait_200(&addr, "/readyz", Duration::from_secs(5))
        .await
        .expect("becomes ready");
    let closed = ports::free_addr();
    let err = http::wait_200(&closed, "/readyz", Duration::from_millis(200)).await;
    assert!(err.is_err());

    // A Driver handle over a stand-in process polls the same way.
    let cluster = Cluster::new("harness");
    let driver = Driver::new(
        sleeper(&cluster, "fake-driver"),
        closed,
        fake_readyz(2).await,
    );
    driver.wait_ready(Duration::from_secs(5)).await;
    assert!(driver.is_ready().await);
}

#[tokio::test]
#[should_panic(expected = "exited")]
async fn wait_ready_fails_fast_when_the_process_exits() {
    let cluster = Cluster::new("harness");
    let p = cluster.spawn("quitter", Path::new("true"), vec![]);
    let driver = Driver::new(p, ports::free_addr(), ports::free_addr());
    driver.wait_ready(Duration::from_secs(20)).await;
}

#[tokio::test]
async fn client_errors_on_a_closed_port_are_transient() {
    let mut client = sluice_tests::Client::new(&ports::free_addr());
    let err = client.get("q").await.expect_err("nothing listens");
    assert!(sluice_tests::client::is_transient(&err), "{err:?}");
}

#[test]
fn spec_builder_yaml_parses() {
    let sink = PathBuf::from("/tmp/with space/out");
    let spec = Spec::new("demo-1", &sink)
        .partitions(8)
        .rows_per_second(1500)
        .total_rows(6000)
        .interval_ms(50)
        .max_rows_per_batch(300);
    let parsed = sluice_common::spec::QuerySpec::parse(&spec.to_yaml()).expect("valid YAML");
    assert_eq!(parsed.name, "demo-1");
    assert_eq!(parsed.rate().unwrap().partitions, 8);
    assert_eq!(parsed.rate().unwrap().rows_per_second, 1500);
    assert_eq!(parsed.rate().unwrap().total_rows, Some(6000));
    assert_eq!(parsed.trigger.interval_ms, 50);
    assert_eq!(parsed.max_rows_per_batch, Some(300));
    assert_eq!(parsed.sink_path(), Some("/tmp/with space/out"));
    let plain = Spec::new("x", &sink).to_yaml();
    assert!(!plain.contains("total_rows") && !plain.contains("max_rows_per_batch"));
}

#[test]
fn rng_is_deterministic_and_in_range() {
    let (mut a, mut b) = (Rng::new(42), Rng::new(42));
    for _ in 0..1000 {
        assert_eq!(a.next_u64(), b.next_u64());
        let v = a.between(3, 4);
        assert!((3..=4).contains(&v));
        b.between(3, 4);
    }
    assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
}

#[test]
fn binaries_are_looked_up_next_to_the_test() {
    if std::env::var_os("SLUICE_BIN_DIR").is_none() {
        let dir = sluice_tests::bins::bin_dir();
        assert!(
            dir.join("deps").is_dir(),
            "{} is a target dir",
            dir.display()
        );
    }
}

fn write_commit(root: &Path, batch: u64, epoch: u64) {
    let dir = sluice_tests::query_dir(root, "q").join(Log::Commits.dir());
    std::fs::create_dir_all(&dir).unwrap();
    let record =
        serde_json::json!({"version": 1, "batch_id": batch, "epoch": epoch, "num_rows": 1});
    std::fs::write(dir.join(format!("{batch:020}")), record.to_string()).unwrap();
}

#[test]
fn epoch_order_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    for (batch, epoch) in [(0, 1), (1, 1), (2, 3), (10, 3)] {
        write_commit(dir.path(), batch, epoch);
    }
    std::fs::write(
        sluice_tests::query_dir(dir.path(), "q")
            .join(Log::Commits.dir())
            .join(".tmp-x"),
        "{",
    )
    .unwrap();
    let epochs = sluice_tests::assert_epochs_non_decreasing(dir.path(), "q");
    assert_eq!(epochs, vec![(0, 1), (1, 1), (2, 3), (10, 3)]);
    let latest = sluice_tests::latest_entry(dir.path(), "q", Log::Commits).unwrap();
    assert_eq!(latest.0, 10);

    write_commit(dir.path(), 11, 2);
    let r =
        std::panic::catch_unwind(|| sluice_tests::assert_epochs_non_decreasing(dir.path(), "q"));
    assert!(r.is_err(), "a decreasing epoch is caught");
}

#[test]
fn json_query_lookup() {
    let v = serde_json::json!({"queries": [{"name": "a"}, {"name": "b", "state": "RUNNING"}]});
    assert!(sluice_tests::json_has_query(&v, "b"));
    assert!(!sluice_tests::json_has_query(&v, "c"));
}
