//! What `sluice local` prints besides its startup lines: the web UI's URL,
//! the commands to try against the cluster, what the demo query computes,
//! and for each committed batch its progress line followed by the windows
//! it finalised. On a terminal a batch is a table row (under
//! [`output::PROGRESS_HEADER`]); otherwise it is the plain `progress` line,
//! for scripts.

use std::net::SocketAddr;

use sluice_common::spec::QuerySpec;
use sluice_proto::BatchProgress;
use tokio::sync::mpsc;

use super::demo::{self, Sink, Window};
use crate::inproc;
use crate::output;

/// The address the CLI's `--driver` flag defaults to without
/// `SLUICE_DRIVER`.
pub const DEFAULT_DRIVER: &str = "127.0.0.1:7070";

/// The web UI's URL for a driver whose HTTP port listens on `http`.
pub fn ui_url(http: SocketAddr) -> String {
    format!("http://{}/", inproc::advertise(http))
}

/// The driver a `sluice` command reaches without `--driver`.
pub fn default_driver() -> String {
    std::env::var("SLUICE_DRIVER").unwrap_or_else(|_| DEFAULT_DRIVER.to_string())
}

/// Commands to try against the cluster that clients reach at `driver`,
/// run as `program`: `--driver` is named unless `default` (see
/// [`default_driver`]) is that address already.
pub fn commands(program: &str, query: &str, driver: &str, default: &str) -> Vec<String> {
    let flag = if driver == default {
        String::new()
    } else {
        format!(" --driver {driver}")
    };
    [
        format!("status {query}"),
        format!("progress {query} --follow"),
        "list".to_string(),
    ]
    .iter()
    .map(|c| format!("{program} {c}{flag}"))
    .collect()
}

/// How a person runs this binary: `sluice` when `PATH` finds this very
/// file, else its path (relative to the working directory when under it,
/// as `cargo run` leaves it in `target/`).
pub fn program() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "sluice".to_string();
    };
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    let Some(name) = name else {
        return "sluice".to_string();
    };
    let found = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| same_file(&dir.join(&name), &exe))
    });
    if found {
        return name;
    }
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| exe.strip_prefix(cwd).ok().map(std::path::Path::to_path_buf));
    relative.unwrap_or(exe).display().to_string()
}

fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// What the query `spec` computes, in words, for the lines before its
/// progress; `None` when it is not the demo's windowed query.
pub fn describe(spec: &QuerySpec) -> Option<Vec<String>> {
    if !demo::is_windowed(spec) {
        return None;
    }
    let rate = spec
        .rate()
        .map_or_else(String::new, |r| format!(" ({} rows/s)", r.rows_per_second));
    let watermark = spec.watermark.as_ref().map_or_else(String::new, |w| {
        format!(
            " ({} s behind the latest event)",
            w.delay_ms as f64 / 1000.0
        )
    });
    Some(vec![
        format!(
            "query {}: {}-second windows of the rate source{rate}; each window is shown once, \
             final, when the watermark{watermark} passes its end:",
            spec.name,
            demo::WINDOW_SECONDS,
        ),
        format!("  {}", spec.sql()),
    ])
}

/// Prints each committed batch, and the windows it finalised when it has
/// a sink of windows.
pub struct Printer {
    pub terminal: bool,
    pub sink: Option<Sink>,
}

impl Printer {
    /// Prints the batches as they arrive, in order, until the sender is
    /// dropped.
    pub async fn run(self, mut batches: mpsc::UnboundedReceiver<BatchProgress>) {
        if self.terminal {
            println!("{}", output::PROGRESS_HEADER);
        }
        while let Some(p) = batches.recv().await {
            self.batch(&p).await;
        }
    }

    async fn batch(&self, p: &BatchProgress) {
        if self.terminal {
            println!("{}", output::progress_row(p));
        } else {
            println!("{}", output::progress_line(p));
        }
        let Some(sink) = &self.sink else {
            return;
        };
        match sink.windows(p.batch_id).await {
            Ok(Some(windows)) => {
                for w in windows {
                    println!("{}", window_line(&p.name, &w, self.terminal));
                }
            }
            Ok(None) => tracing::debug!(
                batch = p.batch_id,
                "the batch's sink manifest is gone; its windows are not shown"
            ),
            Err(e) => {
                tracing::warn!(batch = p.batch_id, error = %format!("{e:#}"), "cannot read the batch's windows");
                eprintln!(
                    "note: cannot read the windows of batch {}: {e:#}",
                    p.batch_id
                );
            }
        }
    }
}

/// A window's line: under its batch's row on a terminal, else after the
/// query's name like a progress line (`demo window 14:03:10-...`).
pub fn window_line(query: &str, w: &Window, terminal: bool) -> String {
    if terminal {
        format!("       window {}", w.text())
    } else {
        format!("{query} window {}", w.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ui_url_is_reachable_from_this_host() {
        assert_eq!(
            ui_url("0.0.0.0:7071".parse().unwrap()),
            "http://127.0.0.1:7071/"
        );
        assert_eq!(
            ui_url("127.0.0.2:9000".parse().unwrap()),
            "http://127.0.0.2:9000/"
        );
    }

    #[test]
    fn commands_name_the_driver_unless_it_is_the_default() {
        let c = commands("sluice", "demo", DEFAULT_DRIVER, DEFAULT_DRIVER);
        assert_eq!(
            c,
            [
                "sluice status demo",
                "sluice progress demo --follow",
                "sluice list"
            ]
        );
        let c = commands(
            "target/release/sluice",
            "demo",
            "127.0.0.1:9",
            DEFAULT_DRIVER,
        );
        assert_eq!(
            c[0],
            "target/release/sluice status demo --driver 127.0.0.1:9"
        );
        assert!(c.iter().all(|l| l.ends_with(" --driver 127.0.0.1:9")));
        // SLUICE_DRIVER elsewhere: the default address needs the flag too.
        let c = commands("sluice", "demo", DEFAULT_DRIVER, "10.0.0.1:7070");
        assert_eq!(c[2], "sluice list --driver 127.0.0.1:7070");
    }

    #[test]
    fn the_program_is_a_path_that_exists_or_found_on_path() {
        let p = program();
        let path = std::path::Path::new(&p);
        assert!(path.exists() || !p.contains('/'), "{p}");
    }

    #[test]
    fn only_the_windowed_demo_is_described() {
        let demo = crate::queries::RateQuery {
            name: "demo".into(),
            partitions: 4,
            rows_per_second: 250,
            total_rows: None,
            trigger_ms: 1000,
            max_rows_per_batch: None,
            sink: "/tmp/out".into(),
            sql: Some(demo::SQL.into()),
            format: "jsonl",
        };
        let spec = QuerySpec::parse(&demo::spec_text(&demo)).unwrap();
        let lines = describe(&spec).unwrap();
        assert!(
            lines[0].starts_with("query demo: 10-second windows"),
            "{lines:?}"
        );
        assert!(lines[0].contains("(250 rows/s)"), "{lines:?}");
        assert!(lines[0].contains("watermark (2 s behind"), "{lines:?}");
        assert_eq!(lines[1], format!("  {}", demo::SQL));
        let plain =
            QuerySpec::parse(&crate::queries::RateQuery { sql: None, ..demo }.spec_text()).unwrap();
        assert_eq!(describe(&plain), None);
    }

    #[test]
    fn window_lines_follow_their_batch() {
        let w = Window {
            start_ms: 0,
            end_ms: 10_000,
            rows: 3,
            min_value: 0,
            max_value: 2,
            avg_value: 1.0,
        };
        assert_eq!(
            window_line("demo", &w, false),
            "demo window 00:00:00-00:00:10 UTC  rows 3  values 0..2  avg 1"
        );
        assert!(window_line("demo", &w, true).starts_with("       window 00:00:00"));
    }
}
