//! Executor identity: one live process per executor id.
//!
//! Each executor process has an incarnation, fixed when it starts and
//! larger for a process started later. When a connection says hello with
//! an id that is already attached, the incarnations decide, once:
//!
//! ```text
//!  new == attached   the same process reconnected: the new stream replaces the old
//!  new >  attached   a newer process (a restarted pod): it replaces the old one,
//!                    which is told it was replaced and exits
//!  new <  attached   an older process: refused, and it exits
//! ```
//!
//! So two live processes with one id never evict each other in a loop. Pure.

/// What to do with a hello whose id may already be attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The id is free.
    Fresh,
    /// The same process on a new stream: drop the old stream.
    Reconnect,
    /// A newer process: tell the attached one it was replaced.
    Replace { older: u64 },
    /// An older process than the attached one: refuse it.
    Refuse { newer: u64 },
}

/// How far ahead of the driver's clock an incarnation's start may be.
pub const MAX_CLOCK_SKEW_MS: u64 = 10 * 60 * 1000;

/// Whether an incarnation started (its high bits are the start time in
/// milliseconds) no later than the driver's `now_ms` plus the skew
/// allowed: a larger one would lock out every later process of its id.
pub fn plausible(incarnation: u64, now_ms: u64) -> bool {
    incarnation >> 16 <= now_ms.saturating_add(MAX_CLOCK_SKEW_MS)
}

/// Decides on a hello of `incarnation` when `attached` holds the
/// incarnation of the connection with the same id, if any.
pub fn admit(attached: Option<u64>, incarnation: u64) -> Admit {
    match attached {
        None => Admit::Fresh,
        Some(a) if a == incarnation => Admit::Reconnect,
        Some(a) if a < incarnation => Admit::Replace { older: a },
        Some(a) => Admit::Refuse { newer: a },
    }
}

/// The message of a replaced or refused executor, and what `sluice
/// cluster` shows.
pub fn conflict_message(id: &str, older: u64, newer: u64) -> String {
    format!(
        "executor id {id:?} is used by two processes: incarnation {newer} (newer) \
         replaced incarnation {older}; give each executor its own --id"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incarnation_from_the_future_is_implausible() {
        let now = 1_700_000_000_000u64;
        assert!(plausible(now << 16 | 0xffff, now));
        assert!(plausible((now + MAX_CLOCK_SKEW_MS) << 16, now));
        assert!(!plausible((now + MAX_CLOCK_SKEW_MS + 1) << 16, now));
        assert!(!plausible(u64::MAX, now));
    }

    #[test]
    fn the_newer_process_wins_once() {
        assert_eq!(admit(None, 5), Admit::Fresh);
        assert_eq!(admit(Some(5), 5), Admit::Reconnect);
        assert_eq!(admit(Some(5), 9), Admit::Replace { older: 5 });
        assert_eq!(admit(Some(9), 5), Admit::Refuse { newer: 9 });
        // After the replace, the older process's retry is refused: no loop.
        assert_eq!(admit(Some(9), 5), Admit::Refuse { newer: 9 });
    }
}
