//! A headless Chromium driven over the DevTools protocol, for the web UI
//! tests. The browser runs with a fresh profile in a temporary directory,
//! no network features beyond the page's own origin, and is killed when
//! the [`Browser`] is dropped, also when a test fails.
//!
//! The DevTools client is blocking: call it from `spawn_blocking` or
//! `block_in_place`.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use headless_chrome::protocol::cdp::Page::{CaptureScreenshotFormatOption, Viewport};
use headless_chrome::{LaunchOptions, Tab};
use serde_json::Value;

/// The browser window, in CSS pixels.
const WINDOW: (u32, u32) = (1280, 1500);

/// Debian's `chromium` package (scripts/deps.sh installs it).
pub const CHROMIUM: &str = "/usr/bin/chromium";

pub struct Browser {
    tab: Arc<Tab>,
    // Dropped after the tab: kills the browser, then removes its profile.
    _browser: headless_chrome::Browser,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start() -> Browser {
        let profile = tempfile::tempdir().expect("browser profile dir");
        let args: Vec<&OsStr> = [
            "--disable-quic",
            "--disable-component-update",
            "--disable-background-networking",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--metrics-recording-only",
            "--hide-scrollbars",
        ]
        .into_iter()
        .map(OsStr::new)
        .collect();
        let options = LaunchOptions::default_builder()
            .path(Some(CHROMIUM.into()))
            .headless(true)
            .sandbox(false)
            .enable_gpu(false)
            .user_data_dir(Some(profile.path().to_path_buf()))
            .window_size(Some(WINDOW))
            .idle_browser_timeout(Duration::from_secs(300))
            .args(args)
            .build()
            .expect("browser options");
        let browser = headless_chrome::Browser::new(options)
            .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e:#}"));
        let tab = browser.new_tab().expect("a browser tab");
        tab.set_default_timeout(Duration::from_secs(30));
        Browser {
            tab,
            _browser: browser,
            _profile: profile,
        }
    }

    /// Loads `url` and waits until it has loaded.
    pub fn goto(&self, url: &str) {
        self.tab
            .navigate_to(url)
            .and_then(|t| t.wait_until_navigated())
            .unwrap_or_else(|e| panic!("loading {url}: {e:#}"));
    }

    /// The value of a JavaScript expression, as JSON.
    pub fn eval(&self, expr: &str) -> Value {
        let js = format!("JSON.stringify((() => {{ return ({expr}); }})()) ?? 'null'");
        let remote = self
            .tab
            .evaluate(&js, false)
            .unwrap_or_else(|e| panic!("evaluating {expr}: {e:#}"));
        let text = remote
            .value
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("{expr} gave no value: {:?}", remote.description));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{expr}: {e}: {text}"))
    }

    /// Runs a statement for its effect.
    pub fn run(&self, js: &str) {
        self.tab
            .evaluate(js, false)
            .unwrap_or_else(|e| panic!("running {js}: {e:#}"));
    }

    /// Polls `expr` until it is truthy, and returns its value; panics
    /// after `timeout` with `what` and the page's last value.
    pub fn wait_for(&self, what: &str, expr: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expr);
            let truthy = !matches!(&v, Value::Null | Value::Bool(false))
                && v.as_f64() != Some(0.0)
                && v.as_str() != Some("");
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                panic!("{what}: {expr} is still {v} after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The text of the element `selector` ("" when absent).
    pub fn text(&self, selector: &str) -> String {
        let sel = serde_json::to_string(selector).expect("a string encodes");
        self.eval(&format!("document.querySelector({sel})?.textContent ?? ''"))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Saves a PNG of the page as it is now, down to the end of its
    /// content (at most the window's height).
    pub fn screenshot(&self, path: &Path) {
        let height = self
            .eval("Math.min(window.innerHeight, Math.max(400, document.body.scrollHeight))")
            .as_f64()
            .unwrap_or(WINDOW.1 as f64);
        let clip = Viewport {
            x: 0.0,
            y: 0.0,
            width: WINDOW.0 as f64,
            height,
            scale: 1.0,
        };
        let png = self
            .tab
            .capture_screenshot(CaptureScreenshotFormatOption::Png, None, Some(clip), true)
            .unwrap_or_else(|e| panic!("screenshot: {e:#}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write the screenshot");
    }
}
