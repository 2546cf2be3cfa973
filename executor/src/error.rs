//! The one error type of the executor.
//!
//! Two families share it: errors of the connection to a driver (always
//! retried by the connection loop; the executor never exits because a driver
//! is down) and errors of one task (mapped to a wire `ErrorKind` by
//! [`crate::task::task_error`]).

use sluice_common::error::chain;

/// Errors of the executor: configuration, the driver connection, tasks.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// A flag or a field of [`crate::ExecutorConfig`] is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The TCP/HTTP2 connection to a driver failed.
    #[error("cannot connect to driver {addr}: {}", chain(source))]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },

    /// The driver refused or broke the attach stream with a status.
    #[error("driver {addr}: {}: {}", status.code(), status.message())]
    Rpc { addr: String, status: tonic::Status },

    /// The driver ended the attach stream cleanly, or dropped our requests.
    #[error("driver {addr} closed the stream")]
    StreamClosed { addr: String },

    /// A task assignment lacks a field or has an impossible value.
    #[error("malformed task assignment: {0}")]
    MalformedTask(String),

    /// A task came from an epoch older than one this executor has seen.
    #[error("task epoch {task_epoch} is older than epoch {max_seen} already seen")]
    StaleEpoch { task_epoch: u64, max_seen: u64 },

    /// The executor is shutting down and takes no new tasks.
    #[error("executor draining")]
    Draining,

    /// Another process with this executor id is newer: this one was
    /// replaced, or refused, and must stop rather than fight back.
    #[error("{0}")]
    Replaced(String),

    /// A source file is malformed, or changed or vanished after its batch
    /// was planned: the query cannot go on without losing data.
    #[error("{0}")]
    BadInput(String),

    /// A task names a place outside this executor's `--allowed-paths`, or
    /// a symbolic link leads there: never retried, the query fails.
    #[error("refused by this executor's --allowed-paths: {0}")]
    PathNotAllowed(String),

    /// A stateful query's state outgrew what this executor may hold.
    #[error(
        "query {query}: one partition of its state would hold {bytes} bytes, above this executor's --max-state-bytes {limit}; raise the limit, add state_partitions, or bound the state with a watermark"
    )]
    StateTooLarge {
        query: String,
        bytes: u64,
        limit: u64,
    },

    /// The executor's local state files failed (a full or broken disk):
    /// retried, as the state is rebuilt from the checkpoint on any
    /// executor.
    #[error("local state store: {0}")]
    LocalState(String),

    /// A task's output passed the cap the driver set for one task.
    #[error(
        "a task's output passed {bytes} bytes, above the cap of {limit} bytes per task (the driver's --max-output-bytes-per-task); the query makes far more output than input"
    )]
    OutputTooLarge { bytes: u64, limit: u64 },

    /// A task panicked or broke an invariant: a fault in Sluice, which a
    /// retry would meet again, so never retried.
    #[error("task panicked: {0}")]
    TaskPanicked(String),

    /// Source, sink or storage failure inside a task.
    #[error(transparent)]
    Common(#[from] sluice_common::Error),

    /// The task's query could not be planned or run.
    #[error(transparent)]
    Sql(#[from] sluice_sql::SqlError),
}

/// A Kafka client error is the `sluice-common` error of the same text and
/// retryability, as a task reports it ([`crate::task::error_kind`]).
impl From<sluice_kafka::Error> for ExecutorError {
    fn from(e: sluice_kafka::Error) -> Self {
        ExecutorError::Common(e.into())
    }
}

impl ExecutorError {
    /// True when the same operation may succeed if tried again (on this
    /// executor or another one).
    pub fn is_retryable(&self) -> bool {
        match self {
            ExecutorError::Connect { .. }
            | ExecutorError::Rpc { .. }
            | ExecutorError::StreamClosed { .. }
            | ExecutorError::Draining
            | ExecutorError::LocalState(_) => true,
            ExecutorError::Common(e) => e.is_retryable(),
            ExecutorError::Sql(e) => e.is_retryable(),
            ExecutorError::Config(_)
            | ExecutorError::Replaced(_)
            | ExecutorError::MalformedTask(_)
            | ExecutorError::TaskPanicked(_)
            | ExecutorError::BadInput(_)
            | ExecutorError::PathNotAllowed(_)
            | ExecutorError::StateTooLarge { .. }
            | ExecutorError::OutputTooLarge { .. }
            | ExecutorError::StaleEpoch { .. } => false,
        }
    }

    /// The gRPC status behind this error, if any.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            ExecutorError::Rpc { status, .. } => Some(status),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryability() {
        assert!(ExecutorError::Draining.is_retryable());
        assert!(ExecutorError::StreamClosed { addr: "a".into() }.is_retryable());
        assert!(!ExecutorError::Config("x".into()).is_retryable());
        assert!(!ExecutorError::MalformedTask("x".into()).is_retryable());
        assert!(!ExecutorError::TaskPanicked("x".into()).is_retryable());
        let conflict = sluice_common::Error::Conflict { path: "p".into() };
        assert!(!ExecutorError::from(conflict).is_retryable());
    }
}
