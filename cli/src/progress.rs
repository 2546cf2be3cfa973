//! The Progress stream: the `progress` command (with `--follow` on a
//! terminal, the live view of `live.rs`), and the stream that `local` and
//! `bench` reuse. With `follow`, a broken stream (a driver
//! restart or failover) is reopened and batches already seen are skipped.

use std::io::IsTerminal;
use std::time::Duration;

use sluice_proto::{BatchProgress, ProgressRequest, QueryStatus};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{CliError, Client};
use crate::commands::get;
use crate::live::{self, Live, Screen};
use crate::output;
use crate::output::wait_exit_code;

/// How often a follow stream checks whether the query has ended.
const STATE_POLL: Duration = Duration::from_millis(500);
/// How long to wait for the last batches after the query ended.
const LAST_BATCH_GRACE: Duration = Duration::from_secs(2);

/// How a progress stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server closed a non-follow stream: every retained batch was sent.
    Ended,
    /// The query reached this terminal state.
    Terminal(i32),
    /// `shutdown` was cancelled.
    Cancelled,
}

/// True when a batch is new: above the last one handed out.
pub fn is_new(last: Option<u64>, batch_id: u64) -> bool {
    last.is_none_or(|l| batch_id > l)
}

/// True when every committed batch (up to `last_committed`, -1 for none)
/// has been handed out.
pub fn caught_up(last: Option<u64>, last_committed: i64) -> bool {
    last_committed < 0
        || last.is_some_and(|l| i64::try_from(l).unwrap_or(i64::MAX) >= last_committed)
}

/// Streams the progress of `query`, calling `on_batch` once per batch in
/// order, until the stream ends (without `follow`), the query is terminal
/// and its last batch was handed out, or `shutdown` is cancelled.
///
/// With `follow`, the query's state is also polled: a follow stream may stay
/// open after the query ends.
pub async fn stream(
    client: &mut Client,
    query: &str,
    follow: bool,
    shutdown: &CancellationToken,
    mut on_batch: impl FnMut(&BatchProgress),
) -> Result<Outcome, CliError> {
    let mut last: Option<u64> = None;
    let mut tick = tokio::time::interval(STATE_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The terminal state once seen, and how long to wait for its last batch.
    let mut terminal: Option<(QueryStatus, Instant)> = None;
    loop {
        let opened = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(Outcome::Cancelled),
            r = client.call(|mut rpc| {
                let query = query.to_string();
                async move { rpc.progress(ProgressRequest { query, follow }).await }
            }) => r?,
        };
        let mut messages = opened;
        let broke = loop {
            if let Some((s, until)) = &terminal
                && (caught_up(last, s.last_committed_batch) || Instant::now() >= *until)
            {
                return Ok(Outcome::Terminal(s.state));
            }
            let msg = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(Outcome::Cancelled),
                m = messages.message() => m,
                _ = tick.tick(), if follow => {
                    if terminal.is_none() {
                        terminal = tokio::select! {
                            biased;
                            _ = shutdown.cancelled() => return Ok(Outcome::Cancelled),
                            t = poll_terminal(client, query) => t,
                        };
                    }
                    continue;
                }
            };
            match msg {
                Ok(Some(p)) => {
                    if is_new(last, p.batch_id) {
                        on_batch(&p);
                        last = Some(p.batch_id);
                    }
                }
                Ok(None) => break None,
                Err(status) => break Some(CliError::from_status(client.current_addr(), &status)),
            }
        };
        match broke {
            Some(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "progress stream broke; reopening");
                client.reset();
            }
            Some(e) => return Err(e),
            None if !follow => return Ok(Outcome::Ended),
            None => {
                // A follow stream that ends: the query ended, or the driver
                // is going down. Ask which.
                let s = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Ok(Outcome::Cancelled),
                    s = get(client, query) => s?,
                };
                if wait_exit_code(s.state).is_some() {
                    return Ok(Outcome::Terminal(s.state));
                }
                client.reset();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The query's status if it is terminal, with the time until which to wait
/// for its last batches. Errors are left to the stream to notice.
async fn poll_terminal(client: &mut Client, query: &str) -> Option<(QueryStatus, Instant)> {
    match get(client, query).await {
        Ok(s) if wait_exit_code(s.state).is_some() => Some((s, Instant::now() + LAST_BATCH_GRACE)),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(error = %e, "cannot poll the query state");
            None
        }
    }
}

/// Prints one batch as a JSON line or a human line.
pub fn print_batch(p: &BatchProgress, json: bool) {
    if p.skipped_before > 0 {
        eprintln!(
            "note: {} batch(es) before batch {} were not shown: this client read too slowly and the driver no longer holds them",
            p.skipped_before, p.batch_id
        );
    }
    if json {
        println!("{}", output::progress_json(p));
    } else {
        println!("{}", output::progress_line(p));
    }
}

/// The `progress` command.
pub async fn command(
    client: &mut Client,
    query: &str,
    follow: bool,
    json: bool,
) -> anyhow::Result<u8> {
    let shutdown = CancellationToken::new();
    let outcome = if follow && !json && std::io::stdout().is_terminal() {
        // A terminal: one block, redrawn in place.
        let mut live = Live::default();
        let mut screen = Screen::new(std::io::stdout());
        let mut failed = None;
        let outcome = stream(client, query, follow, &shutdown, |p| {
            live.push(p);
            if let Err(e) = screen.draw(&live.render(live::width())) {
                failed.get_or_insert(e);
            }
        })
        .await?;
        if let Some(e) = failed {
            return Err(anyhow::anyhow!("cannot write to the terminal: {e}"));
        }
        outcome
    } else {
        stream(client, query, follow, &shutdown, |p| print_batch(p, json)).await?
    };
    if let Outcome::Terminal(state) = outcome {
        eprintln!("query {query} is {}", output::state_name(state));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_batches_are_handed_out() {
        assert!(is_new(None, 0));
        assert!(is_new(Some(3), 4));
        assert!(!is_new(Some(3), 3));
        assert!(!is_new(Some(3), 1));
    }

    #[test]
    fn caught_up_with_the_last_commit() {
        assert!(caught_up(None, -1));
        assert!(!caught_up(None, 0));
        assert!(!caught_up(Some(4), 5));
        assert!(caught_up(Some(5), 5));
        assert!(caught_up(Some(6), 5));
    }

    async fn collect(addr: &str, follow: bool) -> (Result<Outcome, CliError>, Vec<u64>) {
        let mut client = Client::new(vec![addr.to_string()]).unwrap();
        let mut seen = Vec::new();
        let token = CancellationToken::new();
        let run = stream(&mut client, "q", follow, &token, |p| seen.push(p.batch_id));
        let outcome = tokio::time::timeout(Duration::from_secs(1), run)
            .await
            .unwrap_or(Ok(Outcome::Cancelled));
        (outcome, seen)
    }

    #[tokio::test]
    async fn a_follow_stream_ends_with_the_query_even_if_held_open() {
        use crate::fake_driver::Fake;
        use sluice_proto::QueryState;
        let stop = CancellationToken::new();
        let done = Fake::leader(QueryState::Finished, 5)
            .serve(stop.clone())
            .await;
        let running = Fake::leader(QueryState::Running, 3)
            .serve(stop.clone())
            .await;

        let (outcome, seen) = collect(&done, true).await;
        assert_eq!(
            outcome.unwrap(),
            Outcome::Terminal(QueryState::Finished as i32)
        );
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        let (outcome, seen) = collect(&done, false).await;
        assert_eq!(outcome.unwrap(), Outcome::Ended);
        assert_eq!(seen.len(), 5);
        // A running query is followed until the caller gives up.
        let (outcome, seen) = collect(&running, true).await;
        assert_eq!(outcome.unwrap(), Outcome::Cancelled);
        assert_eq!(seen, vec![0, 1, 2]);
        stop.cancel();
    }
}
