//! Tracing setup for the binaries: `SLUICE_LOG` (or `RUST_LOG`) filters,
//! defaulting to `info` (`warn` for the executor's embedded state store,
//! whose `info` lines describe every flush and compaction). Logs go to stderr, as text or as one JSON object a
//! line (`--log-format json`), or to a file for a process whose terminal
//! shows something else (`sluice local`).
//!
//! A JSON line carries its event's fields and every span it is in, each
//! with its fields: a task's lines on an executor name the query, batch,
//! partition, attempt and epoch, as the driver's lines of that batch do.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use tracing_subscriber::EnvFilter;

fn filter() -> EnvFilter {
    let filter = std::env::var("SLUICE_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info,fjall=warn,lsm_tree=warn".to_string());
    EnvFilter::new(filter)
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// For people: one line an event, with the spans' fields before it.
    #[default]
    Text,
    /// For log collectors: one JSON object a line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?}: use text or json")),
        }
    }
}

/// Installs the global subscriber, writing to stderr. Safe to call more
/// than once.
pub fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
}

/// Installs the global subscriber, appending to the file at `path`
/// (created if missing), without colours.
pub fn init_file(path: &Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(Arc::new(file))
        .with_target(false)
        .with_ansi(false)
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn formats_parse_by_name() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        let err = "xml".parse::<LogFormat>().unwrap_err();
        assert!(
            err.contains("\"xml\"") && err.contains("text or json"),
            "{err}"
        );
    }
}
