//! `sluice driver` and `sluice executor`: a node of a cluster run by this
//! same binary, with the node's own flags (`sluice driver --help`), its
//! logging and its signals. SIGTERM or SIGINT cancels the shutdown token: a
//! leader driver stops its term and resigns; an executor drains its tasks.
//!
//! These two subcommands are dispatched before the client's flags are
//! parsed: a node's flags (`--tls-cert`, `--token`, ...) are its own, not
//! the client's global ones of the same names.

use std::ffi::OsString;
use std::process::ExitCode;

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

/// A binary's `main`: on the runtime executors need (embedded or not,
/// they run queries on its threads), a node when the first argument names
/// one, else `other`. The one place where a binary's errors are printed
/// (`error: ...`, exit code 1).
pub fn main<F>(other: impl FnOnce() -> F) -> ExitCode
where
    F: Future<Output = anyhow::Result<u8>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(sluice_executor::THREAD_STACK_BYTES)
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        let mut args = std::env::args_os().skip(1).peekable();
        match Node::named(args.peek()) {
            Some(node) => run(node, args.skip(1)).await.map(|()| 0),
            None => other().await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
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
