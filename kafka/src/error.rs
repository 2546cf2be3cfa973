//! The one error type of `sluice-kafka`. Every variant says whether the
//! call that produced it may be retried; each becomes the
//! `sluice-common` error of the same text and retryability, which the
//! sources and sinks of the driver and the executor report.

use sluice_common::Error as CommonError;

/// Errors of the Kafka client: calls to a cluster, its settings, and the
/// spec checks and secret reads of `sluice-common` it makes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to a Kafka cluster failed: a broker that cannot be reached
    /// or answers with a transient error (retryable), or a topic or
    /// partition that does not exist, a refused login or certificate
    /// (not).
    #[error("kafka at {servers}: {what}: {reason}")]
    Kafka {
        servers: String,
        what: String,
        reason: String,
        retryable: bool,
    },

    /// Settings that cannot be used at all: a server list that names no
    /// server, a TLS configuration rustls refuses. Never retried.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A security setting at fault, or a secret that may not be read: the
    /// spec's checks and the secrets policy of `sluice-common`. Retried as
    /// that error says.
    #[error(transparent)]
    Common(#[from] CommonError),
}

impl Error {
    /// True when the same call may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Kafka { retryable, .. } => *retryable,
            Error::Config(_) => false,
            Error::Common(e) => e.is_retryable(),
        }
    }

    /// A spec field at fault: the invalid-spec error of `sluice-common`,
    /// which names it.
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Common(CommonError::InvalidSpec {
            field: field.into(),
            reason: reason.into(),
        })
    }
}

/// The same error as `sluice-common` states it: text and retryability
/// kept.
impl From<Error> for CommonError {
    fn from(e: Error) -> Self {
        match e {
            Error::Kafka { retryable, .. } => CommonError::Kafka {
                error: Box::new(e),
                retryable,
            },
            Error::Config(reason) => CommonError::Config(reason),
            Error::Common(e) => e,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn down(retryable: bool) -> Error {
        Error::Kafka {
            servers: "b:9092".into(),
            what: "connect".into(),
            reason: "connection refused".into(),
            retryable,
        }
    }

    #[test]
    fn each_error_says_whether_it_may_be_retried() {
        assert!(down(true).is_retryable());
        assert!(!down(false).is_retryable());
        assert!(!Error::Config("x".into()).is_retryable());
        assert!(!Error::invalid("sink.kafka.security.ssl_ca", "missing").is_retryable());
    }

    #[test]
    fn the_common_error_keeps_the_text_and_retryability() {
        for e in [
            down(true),
            down(false),
            Error::Config("kafka: names no server".into()),
            Error::invalid("sink.kafka.security.ssl_ca", "missing"),
        ] {
            let (text, retryable) = (e.to_string(), e.is_retryable());
            let common = CommonError::from(e);
            assert_eq!(common.to_string(), text);
            assert_eq!(common.is_retryable(), retryable);
        }
        let invalid = CommonError::from(Error::invalid("sink.kafka.security.ssl_ca", "missing"));
        assert!(
            matches!(&invalid, CommonError::InvalidSpec { field, .. } if field == "sink.kafka.security.ssl_ca"),
            "{invalid:?}"
        );
    }
}
