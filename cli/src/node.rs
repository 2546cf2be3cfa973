//! `sluice driver` and `sluice executor`: a node of a cluster run by this
//! same binary, with the node's own flags (`sluice driver --help`), its
//! logging and its signals. SIGTERM or SIGINT cancels the shutdown token: a
//! leader driver stops its term and resigns; an executor drains its tasks.
//!
//! These two subcommands are dispatched before the client's flags are
//! parsed: a node's flags (`--tls-cert`, `--token`, ...) are its own, not
//! the client's global ones of the same names.

use std::ffi::OsString;

use clap::Parser;
use tokio_util::sync::CancellationToken;

/// A cluster node that `sluice` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Driver,
    Executor,
}

impl Node {
    /// The node that the first argument names, if it names one.
    pub fn named(arg: Option<&OsString>) -> Option<Node> {
        match arg?.to_str()? {
            "driver" => Some(Node::Driver),
            "executor" => Some(Node::Executor),
            _ => None,
        }
    }
}

/// Runs `node` with `args` (its flags, after the subcommand) until a
/// signal or a fatal error.
pub async fn run(node: Node, args: impl Iterator<Item = OsString>) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(sluice_common::shutdown::cancel_on_signal(shutdown.clone()));
    let result = match node {
        Node::Driver => {
            let cli = sluice_driver::Cli::parse_from(argv("sluice driver", args));
            sluice_common::telemetry::init(cli.log_format);
            let config = sluice_driver::DriverConfig::try_from(cli)?;
            sluice_driver::run(config, shutdown)
                .await
                .map_err(Into::into)
        }
        Node::Executor => {
            let cli = sluice_executor::Cli::parse_from(argv("sluice executor", args));
            sluice_common::telemetry::init(cli.log_format);
            let config = sluice_executor::ExecutorConfig::try_from(cli)?;
            sluice_executor::run(config, shutdown)
                .await
                .map_err(Into::into)
        }
    };
    signals.abort();
    result
}

fn argv(name: &str, args: impl Iterator<Item = OsString>) -> impl Iterator<Item = OsString> {
    std::iter::once(OsString::from(name)).chain(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_driver_and_executor_are_nodes() {
        let named = |s: &str| Node::named(Some(&OsString::from(s)));
        assert_eq!(named("driver"), Some(Node::Driver));
        assert_eq!(named("executor"), Some(Node::Executor));
        assert_eq!(named("status"), None);
        assert_eq!(named("--driver"), None);
        assert_eq!(Node::named(None), None);
    }
}
