//! What to do after a task attempt fails: a pure decision over the error
//! kind and the failures so far.
//!
//! | outcome            | retried       | fails the query after |
//! |--------------------|---------------|-----------------------|
//! | executor lost      | at once       | `max_task_attempts` losses in a row (a poison task) |
//! | storage error      | with backoff, for as long as it lasts | never |
//! | retryable error    | with backoff  | `max_task_attempts` counted failures |
//! | stale epoch        | after a check of the leadership | as a retryable error |
//! | fatal error        | never         | the first              |

use std::time::Duration;

use sluice_common::backoff::Backoff;
use sluice_proto::ErrorKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Retry { delay: Duration },
    Fail,
}

/// The failures of one task so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    /// Retryable errors and stale epochs.
    pub counted: u32,
    /// Storage errors in a row.
    pub storage_streak: u32,
    /// Attempts in a row whose executor was lost while running them.
    pub lost_streak: u32,
}

impl Failures {
    /// Counts one more failure of `kind` (`None`: the executor was lost).
    pub fn record(&mut self, kind: Option<ErrorKind>) {
        match kind {
            None => self.lost_streak += 1,
            Some(ErrorKind::Storage) => {
                self.storage_streak += 1;
                self.lost_streak = 0;
            }
            Some(_) => {
                self.counted += 1;
                self.lost_streak = 0;
            }
        }
    }
}

/// Decides after a failure of `kind`; `f` holds the failures before it.
pub fn after_failure(kind: Option<ErrorKind>, f: Failures, max: u32) -> Next {
    match kind {
        None if f.lost_streak + 1 >= max => Next::Fail,
        None => Next::Retry {
            delay: Duration::ZERO,
        },
        Some(ErrorKind::Storage) => Next::Retry {
            delay: STORAGE_BACKOFF.delay(f.storage_streak),
        },
        Some(ErrorKind::Fatal) => Next::Fail,
        Some(ErrorKind::Retryable | ErrorKind::StaleEpoch | ErrorKind::Unspecified) => {
            if f.counted + 1 >= max {
                Next::Fail
            } else {
                Next::Retry {
                    delay: TASK_BACKOFF.delay(f.counted),
                }
            }
        }
    }
}

/// Storage errors: 100 ms doubling, at most 10 s apart.
pub const STORAGE_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
/// Retried tasks: 100 ms doubling, at most 5 s apart.
pub const TASK_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

#[cfg(test)]
mod tests {
    use super::*;

    fn after(kinds: &[Option<ErrorKind>]) -> Failures {
        let mut f = Failures::default();
        for k in kinds {
            f.record(*k);
        }
        f
    }

    #[test]
    fn lost_executors_retry_at_once_until_a_poison_task_fails() {
        let lost = [None, None, None];
        assert_eq!(
            after_failure(None, after(&lost[..2]), 4),
            Next::Retry {
                delay: Duration::ZERO
            }
        );
        assert_eq!(after_failure(None, after(&lost), 4), Next::Fail);
        // Only losses in a row count.
        let broken = [None, None, Some(ErrorKind::Retryable), None];
        assert!(matches!(
            after_failure(None, after(&broken), 4),
            Next::Retry { .. }
        ));
        assert_eq!(after(&broken).lost_streak, 1);
    }

    #[test]
    fn retryable_errors_stop_at_max_attempts() {
        let k = Some(ErrorKind::Retryable);
        assert_eq!(
            after_failure(k, after(&[]), 4),
            Next::Retry {
                delay: TASK_BACKOFF.delay(0)
            }
        );
        assert!(matches!(
            after_failure(k, after(&[k, k]), 4),
            Next::Retry { .. }
        ));
        assert_eq!(after_failure(k, after(&[k, None, k, k]), 4), Next::Fail);
        assert_eq!(after_failure(k, after(&[]), 1), Next::Fail);
    }

    #[test]
    fn storage_errors_back_off_forever() {
        let k = Some(ErrorKind::Storage);
        let many = Failures {
            counted: 99,
            ..Failures::default()
        };
        assert_eq!(
            after_failure(k, many, 4),
            Next::Retry {
                delay: STORAGE_BACKOFF.delay(0)
            }
        );
        let long = Failures {
            storage_streak: 30,
            ..Failures::default()
        };
        assert_eq!(
            after_failure(k, long, 4),
            Next::Retry {
                delay: Duration::from_secs(10)
            }
        );
    }

    #[test]
    fn fatal_errors_fail_at_once() {
        assert_eq!(
            after_failure(Some(ErrorKind::Fatal), Failures::default(), 4),
            Next::Fail
        );
    }
}
