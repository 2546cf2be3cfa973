//! The one error type of the driver, and its one conversion into a
//! gRPC status.

use sluice_common::Error as CommonError;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{0}")]
    Invalid(String),
    #[error("query {0:?} not found")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    /// No credentials, or credentials this driver does not accept.
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials whose role may not make this call.
    #[error("{0}")]
    PermissionDenied(String),
    #[error("not the leader")]
    NotLeader { leader: Option<String> },
    #[error("the leader is loading its queries; try again")]
    Starting,
    #[error("driver is shutting down")]
    ShuttingDown,
    #[error("deposed: a newer epoch than {epoch} leads")]
    Deposed { epoch: u64 },
    #[error("cancelled")]
    Cancelled,
    /// A newer standalone driver claimed a later epoch: this one must exit
    /// rather than claim yet another and depose it back.
    #[error("replaced: epoch {epoch} was deposed by {by}")]
    Replaced { epoch: u64, by: String },
    /// A query passed one of its limits (its state's size, say): the
    /// message names the query, the limit and the field that sets it.
    #[error("{0}")]
    LimitExceeded(String),
    /// The driver has no capacity for the request now (every planning
    /// thread is busy, say).
    #[error("{0}")]
    Busy(String),
    #[error("task failed: {0}")]
    TaskFailed(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The election's store (etcd) failed or did not answer in time.
    #[error("etcd: {0}")]
    Election(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Common(#[from] CommonError),
}

impl DriverError {
    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            DriverError::NotLeader { .. } | DriverError::ShuttingDown => true,
            DriverError::Starting | DriverError::Busy(_) => true,
            DriverError::Deposed { .. } | DriverError::Cancelled => true,
            DriverError::Io(_) | DriverError::Transport(_) | DriverError::Election(_) => true,
            DriverError::Common(e) => e.is_retryable(),
            _ => false,
        }
    }
}

/// A Kafka client error is the `sluice-common` error of the same text and
/// retryability, as the sources and sinks report it.
impl From<sluice_kafka::Error> for DriverError {
    fn from(e: sluice_kafka::Error) -> Self {
        DriverError::Common(e.into())
    }
}

impl From<DriverError> for tonic::Status {
    fn from(e: DriverError) -> Self {
        use tonic::Code;
        let code = match &e {
            DriverError::Invalid(_) => Code::InvalidArgument,
            DriverError::Common(CommonError::InvalidSpec { .. }) => Code::InvalidArgument,
            DriverError::NotFound(_) => Code::NotFound,
            DriverError::AlreadyExists(_) => Code::AlreadyExists,
            DriverError::FailedPrecondition(_) => Code::FailedPrecondition,
            DriverError::Unauthenticated(_) => Code::Unauthenticated,
            DriverError::PermissionDenied(_) => Code::PermissionDenied,
            DriverError::NotLeader { .. } | DriverError::ShuttingDown => Code::Unavailable,
            DriverError::Starting => Code::Unavailable,
            DriverError::Deposed { .. } | DriverError::Cancelled => Code::Unavailable,
            DriverError::Config(_) => Code::Internal,
            DriverError::Common(CommonError::Catalog {
                retryable: false, ..
            }) => Code::FailedPrecondition,
            DriverError::Common(CommonError::Corrupt { .. }) => Code::DataLoss,
            e if e.is_retryable() => Code::Unavailable,
            _ => Code::Internal,
        };
        let mut status = tonic::Status::new(code, e.to_string());
        if let DriverError::NotLeader { leader: Some(addr) } = &e {
            sluice_proto::set_leader_hint(&mut status, addr);
        }
        status
    }
}
