//! Handles to driver and executor processes. Both dereference to their
//! [`Process`], so `driver.kill()`, `executor.pause()` and so on work
//! directly; dropping a handle SIGKILLs and reaps its process.

use std::ops::Deref;
use std::time::{Duration, Instant};

use crate::http;
use crate::process::Process;

/// How long a driver may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A driver process (`sluice driver`) with its gRPC and HTTP addresses, which stay
/// the same across restarts.
#[derive(Debug)]
pub struct Driver {
    process: Process,
    addr: String,
    http: String,
}

impl Driver {
    /// Wraps a process already started as a driver (the cluster does this).
    pub fn new(process: Process, addr: String, http: String) -> Driver {
        Driver {
            process,
            addr,
            http,
        }
    }

    /// The gRPC address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The HTTP address of `/healthz`, `/readyz`, `/metrics` and the
    /// failpoints.
    pub fn http_addr(&self) -> &str {
        &self.http
    }

    pub fn process(&self) -> &Process {
        &self.process
    }

    /// True when `/readyz` answers 200 now.
    pub async fn is_ready(&self) -> bool {
        http::status(&self.http, "/readyz").await == Ok(200)
    }

    /// Polls `/readyz` until 200. Panics, with the log tail, on timeout or
    /// when the process exits first.
    pub async fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exit_status() {
                panic!(
                    "{} exited ({status}) before /readyz answered 200; log tail:\n{}",
                    self.process.name(),
                    self.process.log_tail(40)
                );
            }
            let last = match http::status(&self.http, "/readyz").await {
                Ok(200) => return,
                Ok(code) => format!("status {code}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                panic!(
                    "{} not ready after {timeout:?} (last /readyz: {last}); log tail:\n{}",
                    self.process.name(),
                    self.process.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Restarts on the same ports and checkpoint root, then waits for
    /// `/readyz`.
    pub async fn restart_ready(&self) {
        self.process.restart();
        self.wait_ready(READY_TIMEOUT).await;
    }

    /// The body of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        let (code, resp) = http::get(&self.http, "/metrics", Duration::from_secs(5))
            .await
            .expect("GET /metrics");
        assert_eq!(code, 200, "GET /metrics");
        String::from_utf8_lossy(http::body(&resp)).into_owned()
    }
}

impl Driver {
    /// The value of one series of `/metrics`, named with its labels as the
    /// exposition prints them (`sluice_takeovers_total{cause="resigned"}`).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.trim().parse().expect("a metric value is a number"))
    }

    /// Waits until this standby holds its stream to the leader (the gauge
    /// `sluice_fast_failover_armed`), and so would hear of a resign.
    pub async fn wait_armed(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.metric("sluice_fast_failover_armed").await != Some(1.0) {
            assert!(
                Instant::now() < deadline,
                "{} holds no stream to the leader after {timeout:?}",
                self.name()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The takeovers this driver counted, by cause.
    pub async fn takeovers(&self, cause: &str) -> f64 {
        let series = format!("sluice_takeovers_total{{cause=\"{cause}\"}}");
        self.metric(&series)
            .await
            .unwrap_or_else(|| panic!("{series} is exported"))
    }
}

/// How long a failpoint's control may take to answer.
const FAILPOINT_TIMEOUT: Duration = Duration::from_secs(5);

/// What `GET /debug/failpoints/{name}` answers (debug builds of the
/// driver).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Failpoint {
    pub armed: bool,
    /// Each hit: the held batch, or the revoked leader's epoch.
    pub hits: Vec<u64>,
}

impl Driver {
    /// Arms (`on`) or disarms the driver's failpoint `name`.
    pub async fn failpoint(&self, name: &str, on: bool) {
        if let Err(e) = self.try_failpoint(name, on).await {
            panic!("{e}");
        }
    }

    /// Whether the failpoint `name` is armed, and its hits.
    pub async fn failpoint_status(&self, name: &str) -> Failpoint {
        self.try_failpoint_status(name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Driver::failpoint`], or why the driver did not take it.
    pub async fn try_failpoint(&self, name: &str, on: bool) -> Result<(), String> {
        let path = format!("/debug/failpoints/{name}");
        let body = if on { "on" } else { "off" };
        let what = format!("PUT {path} {body} on {}", self.name());
        let (code, resp) =
            http::request_with(&self.http, "PUT", &path, &[], body, FAILPOINT_TIMEOUT)
                .await
                .map_err(|e| format!("{what}: {e}"))?;
        match code {
            200 => Ok(()),
            _ => Err(format!(
                "{what}: status {code}: {}",
                String::from_utf8_lossy(http::body(&resp))
            )),
        }
    }

    /// [`Driver::failpoint_status`], or why the driver did not answer.
    pub async fn try_failpoint_status(&self, name: &str) -> Result<Failpoint, String> {
        let path = format!("/debug/failpoints/{name}");
        let what = format!("GET {path} on {}", self.name());
        let (code, resp) = http::get(&self.http, &path, FAILPOINT_TIMEOUT)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let body = http::body(&resp);
        let text = String::from_utf8_lossy(body);
        match code {
            200 => serde_json::from_slice(body).map_err(|e| format!("{what}: {e}: {text}")),
            _ => Err(format!("{what}: status {code}: {text}")),
        }
    }

    /// The hits of the failpoint `name` so far.
    pub async fn failpoint_hits(&self, name: &str) -> Vec<u64> {
        self.failpoint_status(name).await.hits
    }

    /// Waits until the failpoint `name` has a hit; the first one.
    pub async fn wait_failpoint_hit(&self, name: &str, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(&hit) = self.failpoint_hits(name).await.first() {
                return hit;
            }
            assert!(
                Instant::now() < deadline,
                "no hit of failpoint {name} on {} after {timeout:?}",
                self.name()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Deref for Driver {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

/// An executor process (`sluice executor`).
#[derive(Debug)]
pub struct Executor {
    process: Process,
}

impl Executor {
    pub(crate) fn new(process: Process) -> Executor {
        Executor { process }
    }

    pub fn process(&self) -> &Process {
        &self.process
    }
}

impl Deref for Executor {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}
