//! Tracing setup for the binaries: `SLUICE_LOG` (or `RUST_LOG`) filters,
//! defaulting to `info`. Logs go to stderr, or to a file for a process
//! whose terminal shows something else (`sluice local`).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use tracing_subscriber::EnvFilter;

fn filter() -> EnvFilter {
    let filter = std::env::var("SLUICE_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_string());
    EnvFilter::new(filter)
}

/// Installs the global subscriber, writing to stderr. Safe to call more
/// than once.
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
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
