//! The request/response commands: `submit`, `list`, `status`, `stop`,
//! `wait` and `cluster`. Each returns the process exit code; errors go up
//! to `main`, which prints them once.

use std::path::Path;
use std::time::Duration;

use sluice_common::small_file::{self, Limits};
use sluice_proto::{ClusterRequest, ListQueriesRequest, QueryRef, QueryStatus, WaitRequest};
use tokio::time::Instant;
use tonic::Code;

use crate::client::{CliError, Client};
use crate::output;

/// Exit code of `wait` when the deadline passes first.
pub const EXIT_TIMEOUT: u8 = 2;

/// The longest single Wait RPC; the loop re-issues it, so a silent
/// connection loss costs at most this long.
const WAIT_CHUNK: Duration = Duration::from_secs(30);

pub async fn submit(client: &mut Client, file: &Path) -> anyhow::Result<u8> {
    let spec_text = small_file::read_text(file, Limits::DOCUMENT)
        .map_err(|why| anyhow::anyhow!("spec file {} {why}", file.display()))?;
    let resp = crate::queries::submit(client, &spec_text).await?;
    println!("{}", resp.id);
    Ok(0)
}

pub async fn list(client: &mut Client, json: bool) -> anyhow::Result<u8> {
    let resp = client
        .call(|mut rpc| async move { rpc.list(ListQueriesRequest {}).await })
        .await?;
    if json {
        let all: Vec<_> = resp.queries.iter().map(output::status_json).collect();
        println!("{}", serde_json::Value::Array(all));
    } else {
        print!("{}", output::list_table(&resp.queries));
    }
    Ok(0)
}

/// Fetches one query's status by name or id.
pub async fn get(client: &mut Client, query: &str) -> Result<QueryStatus, CliError> {
    client
        .call(|mut rpc| {
            let query = query.to_string();
            async move { rpc.get(QueryRef { query }).await }
        })
        .await
}

pub async fn status(client: &mut Client, query: &str, json: bool) -> anyhow::Result<u8> {
    let s = get(client, query).await?;
    if json {
        println!("{}", output::status_json(&s));
    } else {
        print!("{}", output::status_text(&s));
    }
    Ok(0)
}

pub async fn stop(client: &mut Client, query: &str) -> anyhow::Result<u8> {
    let s = client
        .call(|mut rpc| {
            let query = query.to_string();
            async move { rpc.stop(QueryRef { query }).await }
        })
        .await?;
    println!("{}", output::state_name(s.state));
    Ok(0)
}

pub async fn cluster(client: &mut Client, json: bool) -> anyhow::Result<u8> {
    let c = client
        .call(|mut rpc| async move { rpc.cluster(ClusterRequest {}).await })
        .await?;
    if json {
        println!("{}", output::cluster_json(&c));
    } else {
        print!("{}", output::cluster_text(&c));
    }
    Ok(0)
}

/// The timeout of the next Wait RPC: what is left before the deadline (at
/// least 1 ms, since 0 means forever), at most [`WAIT_CHUNK`].
pub fn wait_chunk_ms(remaining: Option<Duration>) -> u64 {
    let chunk = remaining.map_or(WAIT_CHUNK, |r| r.min(WAIT_CHUNK));
    u64::try_from(chunk.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Waits for a terminal state with the Wait RPC, across driver restarts and
/// failovers, until `timeout` (forever without one).
pub async fn wait(
    client: &mut Client,
    query: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<u8> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut last: Option<QueryStatus> = None;
    loop {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if last.is_some() && remaining == Some(Duration::ZERO) {
            return Ok(timed_out(query, timeout, last.as_ref()));
        }
        let timeout_ms = wait_chunk_ms(remaining);
        let res = client
            .call_until(deadline, |mut rpc| {
                let query = query.to_string();
                async move { rpc.wait(WaitRequest { query, timeout_ms }).await }
            })
            .await;
        match res {
            Ok(s) => {
                if let Some(code) = output::wait_exit_code(s.state) {
                    println!("{}", output::state_name(s.state));
                    if code != 0 {
                        eprintln!("error: query {} failed: {}", s.name, s.error);
                    }
                    return Ok(code);
                }
                last = Some(s);
            }
            Err(CliError::GaveUp { .. }) => return Ok(timed_out(query, timeout, last.as_ref())),
            // A driver that just restarted may not have recovered the query yet.
            Err(e) if last.is_some() && e.code() == Some(Code::NotFound) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn timed_out(query: &str, timeout: Option<Duration>, last: Option<&QueryStatus>) -> u8 {
    let state = last.map_or("unknown", |s| output::state_name(s.state));
    let secs = timeout.map_or(0, |t| t.as_secs());
    eprintln!("error: timed out after {secs} s waiting for query {query} (state: {state})");
    EXIT_TIMEOUT
}

#[cfg(test)]
mod tests {
    use sluice_proto::QueryState;

    use super::*;

    #[test]
    fn wait_chunks_never_mean_forever() {
        assert_eq!(wait_chunk_ms(None), 30_000);
        assert_eq!(wait_chunk_ms(Some(Duration::from_secs(5))), 5_000);
        assert_eq!(wait_chunk_ms(Some(Duration::from_secs(500))), 30_000);
        assert_eq!(wait_chunk_ms(Some(Duration::ZERO)), 1);
    }

    #[tokio::test]
    async fn wait_exits_by_state_and_times_out() {
        use crate::fake_driver::Fake;
        let stop = tokio_util::sync::CancellationToken::new();
        for (state, code) in [
            (QueryState::Finished, 0),
            (QueryState::Stopped, 0),
            (QueryState::Failed, 1),
            (QueryState::Running, EXIT_TIMEOUT),
        ] {
            let addr = Fake::leader(state, 1).serve(stop.clone()).await;
            let mut c = Client::new(vec![addr]).unwrap();
            let got = wait(&mut c, "q", Some(Duration::from_millis(300)))
                .await
                .unwrap();
            assert_eq!(got, code, "{state:?}");
        }
        stop.cancel();
    }

    #[tokio::test]
    async fn a_standby_redirects_to_the_leader_and_dead_addresses_are_skipped() {
        let stop = tokio_util::sync::CancellationToken::new();
        use crate::fake_driver::Fake;
        let leader = Fake::leader(QueryState::Running, 0)
            .serve(stop.clone())
            .await;
        let standby = Fake {
            standby_of: Some(format!("http://{leader}")),
            ..Fake::leader(QueryState::Running, 0)
        }
        .serve(stop.clone())
        .await;
        let mut c = Client::new(vec![standby.clone()]).unwrap();
        let s = get(&mut c, "q").await.unwrap();
        assert_eq!(s.id, "id-of-q");
        assert_eq!(c.current_addr(), leader);

        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut c = Client::new(vec![dead.to_string(), standby]).unwrap();
        let s = get(&mut c, "q").await.unwrap();
        assert_eq!(s.name, "q");
        assert_eq!(c.current_addr(), leader);
        stop.cancel();
    }
}
