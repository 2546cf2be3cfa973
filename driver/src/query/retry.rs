//! What to do after a task attempt fails: a pure decision over the error
//! kind and the attempts so far.
//!
//! | outcome            | retried       | counts toward max_task_attempts |
//! |--------------------|---------------|---------------------------------|
//! | executor lost      | at once       | no                              |
//! | storage error      | with backoff, for as long as it lasts | no            |
//! | retryable error    | with backoff  | yes                             |
//! | stale epoch        | after a check of the leadership | yes           |
//! | fatal error        | never: the query fails           |               |

use std::time::Duration;

use sluice_proto::ErrorKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Retry { delay: Duration, counted: bool },
    Fail,
}

/// `failures` is the number of counted failures before this one.
pub fn after_failure(
    kind: Option<ErrorKind>,
    failures: u32,
    storage_streak: u32,
    max: u32,
) -> Next {
    match kind {
        None => Next::Retry {
            delay: Duration::ZERO,
            counted: false,
        },
        Some(ErrorKind::Storage) => Next::Retry {
            delay: backoff(storage_streak, 10_000),
            counted: false,
        },
        Some(ErrorKind::Fatal) => Next::Fail,
        Some(ErrorKind::Retryable | ErrorKind::StaleEpoch | ErrorKind::Unspecified) => {
            if failures + 1 >= max {
                Next::Fail
            } else {
                Next::Retry {
                    delay: backoff(failures, 5_000),
                    counted: true,
                }
            }
        }
    }
}

/// 100 ms doubling per step, capped at `cap_ms`.
pub fn backoff(step: u32, cap_ms: u64) -> Duration {
    let ms = 100u64.saturating_mul(1u64 << step.min(16));
    Duration::from_millis(ms.min(cap_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_executors_retry_at_once_without_counting() {
        assert_eq!(
            after_failure(None, 3, 0, 4),
            Next::Retry {
                delay: Duration::ZERO,
                counted: false
            }
        );
    }

    #[test]
    fn retryable_errors_stop_at_max_attempts() {
        let k = Some(ErrorKind::Retryable);
        assert_eq!(
            after_failure(k, 0, 0, 4),
            Next::Retry {
                delay: backoff(0, 5000),
                counted: true
            }
        );
        assert!(matches!(after_failure(k, 2, 0, 4), Next::Retry { .. }));
        assert_eq!(after_failure(k, 3, 0, 4), Next::Fail);
        assert_eq!(after_failure(k, 0, 0, 1), Next::Fail);
    }

    #[test]
    fn storage_errors_back_off_forever() {
        let k = Some(ErrorKind::Storage);
        assert_eq!(
            after_failure(k, 99, 0, 4),
            Next::Retry {
                delay: backoff(0, 10_000),
                counted: false
            }
        );
        assert_eq!(
            after_failure(k, 0, 30, 4),
            Next::Retry {
                delay: Duration::from_secs(10),
                counted: false
            }
        );
    }

    #[test]
    fn fatal_errors_fail_at_once() {
        assert_eq!(after_failure(Some(ErrorKind::Fatal), 0, 0, 4), Next::Fail);
    }

    #[test]
    fn backoff_doubles_then_caps() {
        assert_eq!(backoff(0, 5000), Duration::from_millis(100));
        assert_eq!(backoff(3, 5000), Duration::from_millis(800));
        assert_eq!(backoff(40, 5000), Duration::from_millis(5000));
    }
}
