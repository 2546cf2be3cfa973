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

    /// The HTTP address of `/healthz`, `/readyz` and `/metrics`.
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
