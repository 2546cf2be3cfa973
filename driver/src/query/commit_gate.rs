//! A user's stop against a batch commit under way.
//!
//! A batch's commit runs from its sink commit (a manifest, a Delta log
//! entry, Kafka transactions recorded) to `commits/N`. A stop that cut it
//! off between the two would leave output that is written but not
//! recorded: the query could then restart only as it ran, never
//! rescaled. So a stop lets a commit that had begun finish, for up to
//! [`STOP_GRACE`], and then ends the runner; a commit cannot begin once
//! the stop came. The end of a term (deposition, shutdown) does not wait:
//! the next leader's recovery settles the batch.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a stop waits for a batch commit under way. Below a
/// restart's wait for the stopped runner, so that a restart after a stop
/// finds the runner ended.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Whether a batch commit of one query is under way.
pub struct CommitGate {
    committing: watch::Sender<bool>,
}

/// Held while a batch commit runs; dropping it ends the commit.
#[must_use = "the commit is under way only while its shield is held"]
pub struct Shield<'a>(Option<&'a watch::Sender<bool>>);

impl Shield<'_> {
    /// A shield over nothing, for a batch loop with no stop to hold off.
    pub fn none() -> Self {
        Shield(None)
    }
}

impl Drop for Shield<'_> {
    fn drop(&mut self) {
        if let Some(committing) = self.0 {
            committing.send_replace(false);
        }
    }
}

impl Default for CommitGate {
    fn default() -> Self {
        CommitGate {
            committing: watch::Sender::new(false),
        }
    }
}

impl CommitGate {
    /// Begins a commit, unless `stop` was cancelled (`None`): then the
    /// runner is ending and the batch must not begin its commit.
    pub fn enter(&self, stop: &CancellationToken) -> Option<Shield<'_>> {
        if stop.is_cancelled() {
            return None;
        }
        let was = self.committing.send_replace(true);
        assert!(!was, "two batch commits of one query at once");
        Some(Shield(Some(&self.committing)))
    }

    /// Waits until no commit is under way, at most `limit`; whether none is.
    pub async fn idle(&self, limit: Duration) -> bool {
        let mut rx = self.committing.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let idle = rx.wait_for(|committing| !*committing);
        tokio::time::timeout(limit, idle).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_waits_for_the_commit_under_way_and_none_begins_after_it() {
        let gate = std::sync::Arc::new(CommitGate::default());
        let stop = CancellationToken::new();
        let short = Duration::from_millis(20);
        assert!(gate.idle(short).await, "no commit began");
        let shield = gate.enter(&stop).expect("no stop yet");
        assert!(!gate.idle(short).await, "the commit is under way");
        stop.cancel();
        let ending = gate.clone();
        let waited = tokio::spawn(async move { ending.idle(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(shield);
        assert!(waited.await.unwrap(), "the commit ended");
        assert!(gate.enter(&stop).is_none(), "no commit begins after a stop");
        assert!(gate.idle(short).await);
    }

    #[test]
    #[should_panic(expected = "two batch commits")]
    fn two_commits_at_once_are_a_bug() {
        let gate = CommitGate::default();
        let stop = CancellationToken::new();
        let _first = gate.enter(&stop);
        let _second = gate.enter(&stop);
    }
}
