//! The one error type of `sluice-sql`.

use datafusion::error::DataFusionError;

use crate::InputError;

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The SQL does not parse or plan: a syntax error (with its line and
    /// column), an unknown column, table or function, a type mismatch.
    #[error("sql: {0}")]
    Invalid(String),

    /// The SQL is valid, but uses a construct that Sluice does not run.
    #[error("sql: {construct} is not supported: {reason}")]
    Unsupported { construct: String, reason: String },

    /// Running the query failed (a cast of a bad value, say).
    #[error("sql: {0}")]
    Execution(String),

    /// The task's operators passed its memory pool: the same task would
    /// again, so it is not retried.
    #[error(
        "sql: the task ran out of its memory ({0}); raise the executors' --max-task-memory-bytes"
    )]
    Resources(String),

    /// The query is beyond a planning limit (its size, its nesting, the
    /// time it takes to plan); the message names the limit.
    #[error("sql: {0}")]
    TooLarge(String),

    /// No planning thread was free within the planning budget.
    #[error("sql: {0}; try again")]
    Busy(String),

    /// Planning panicked: a fault in the planner, not in the query.
    #[error("sql: planning panicked: {0}")]
    Panicked(String),

    /// Reading the input failed.
    #[error("{0}")]
    Input(InputError),
}

impl SqlError {
    /// True when the same task may succeed if tried again. Planning and
    /// execution are deterministic, and so is a task's memory pool; only
    /// busy planning threads may pass. Whether an input error may pass is
    /// for its reader to say.
    pub fn is_retryable(&self) -> bool {
        matches!(self, SqlError::Busy(_))
    }

    pub(crate) fn from_planning(e: DataFusionError) -> Self {
        SqlError::Invalid(message(&e))
    }

    pub(crate) fn from_execution(e: DataFusionError) -> Self {
        if let DataFusionError::ResourcesExhausted(m) = e.find_root() {
            return SqlError::Resources(m.clone());
        }
        match e {
            DataFusionError::External(inner) => SqlError::Input(inner),
            other => SqlError::Execution(message(&other)),
        }
    }
}

/// DataFusion's message without its backtrace.
fn message(e: &DataFusionError) -> String {
    e.strip_backtrace()
}
