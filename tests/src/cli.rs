//! Runs the `sluice` command line client and captures what it printed.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::bins::{CLI, bin};

/// A CLI run never takes longer than this.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// What one `sluice` run printed and how it exited.
#[derive(Debug, Clone)]
pub struct CliOutput {
    pub args: Vec<String>,
    /// `None` when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Panics unless the exit code is `code`.
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "unexpected exit code of {self}");
        self
    }

    pub fn assert_success(&self) -> &Self {
        self.assert_code(0)
    }

    pub fn assert_failure(&self) -> &Self {
        assert!(
            self.code.is_some_and(|c| c != 0),
            "expected a non-zero exit: {self}"
        );
        self
    }

    /// Stdout parsed as JSON; panics when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self}"))
    }
}

impl std::fmt::Display for CliOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`sluice {}` exited {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `sluice --driver <drivers> <args..>` in `cwd`.
pub async fn run_cli(drivers: &str, args: &[&str], cwd: &Path) -> CliOutput {
    let mut all = vec!["--driver".to_string(), drivers.to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    let mut cmd = tokio::process::Command::new(bin(CLI));
    cmd.args(&all)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .env("NO_COLOR", "1")
        .env_remove("SLUICE_DRIVER")
        .kill_on_drop(true);
    let output = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("`sluice {}` ran over {CLI_TIMEOUT:?}", all.join(" ")))
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}"));
    CliOutput {
        args: all,
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
