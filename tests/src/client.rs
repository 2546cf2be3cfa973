//! A gRPC client of one or more drivers for tests. Each call goes to the
//! driver that answered last; on `UNAVAILABLE` it follows the
//! `sluice-leader` hint or tries the next address. `wait_for` polls `Get`
//! and rides out a driver that is restarting.

use std::future::Future;
use std::time::{Duration, Instant};

use sluice_common::tls::{Bearer, ClientTls};
use sluice_proto::query_service_client::QueryServiceClient;
use sluice_proto::{
    ClusterInfo, ClusterRequest, ListQueriesRequest, QueryRef, QueryState, QueryStatus,
    SubmitRequest, SubmitResponse,
};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Response, Status};

const POLL: Duration = Duration::from_millis(50);

pub use sluice_proto::state_name;

/// Errors a poll should ride out: the driver is down, restarting, paused,
/// not the leader, or has not loaded its checkpoint yet.
pub fn is_transient(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded
    )
}

/// The client type of one call: every call carries the token.
pub type Rpc = QueryServiceClient<InterceptedService<Channel, Bearer>>;

#[derive(Clone)]
pub struct Client {
    addrs: Vec<String>,
    channels: Vec<Channel>,
    current: usize,
    token: Bearer,
}

impl Client {
    /// A plaintext client of the comma-separated `drivers`. Connects lazily.
    pub fn new(drivers: &str) -> Client {
        Client::secured(drivers, &ClientTls::default(), None)
    }

    /// A client over TLS with `tls` (plaintext when it has no CA), sending
    /// `token` with every call.
    pub fn secured(drivers: &str, tls: &ClientTls, token: Option<&str>) -> Client {
        let addrs: Vec<String> = drivers.split(',').map(|s| s.trim().to_string()).collect();
        let channels = addrs
            .iter()
            .map(|a| {
                let endpoint = Endpoint::from_shared(format!("{}://{a}", tls.scheme()))
                    .expect("driver address");
                tls.apply(endpoint)
                    .expect("TLS settings")
                    .connect_timeout(Duration::from_secs(1))
                    .timeout(Duration::from_secs(5))
                    .connect_lazy()
            })
            .collect();
        Client {
            addrs,
            channels,
            current: 0,
            token: Bearer::new(token).expect("token"),
        }
    }

    /// A raw gRPC client of the first driver, for tests that shape their
    /// own requests.
    pub fn rpc(&self) -> Rpc {
        QueryServiceClient::with_interceptor(self.channels[0].clone(), self.token.clone())
    }

    async fn call<T, F, Fut>(&mut self, mut f: F) -> Result<T, Status>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let mut last = None;
        for _ in 0..=self.addrs.len() {
            let client = QueryServiceClient::with_interceptor(
                self.channels[self.current].clone(),
                self.token.clone(),
            );
            match f(client).await {
                Ok(resp) => return Ok(resp.into_inner()),
                Err(status) if status.code() == Code::Unavailable && self.addrs.len() > 1 => {
                    let hint = sluice_proto::leader_hint(&status)
                        .and_then(|h| self.addrs.iter().position(|a| *a == h));
                    self.current = hint
                        .filter(|&i| i != self.current)
                        .unwrap_or((self.current + 1) % self.addrs.len());
                    last = Some(status);
                }
                Err(status) => return Err(status),
            }
        }
        Err(last.unwrap_or_else(|| Status::unavailable("no driver address")))
    }

    /// Submits spec text (YAML or JSON), as `sluice submit` does.
    pub async fn submit(&mut self, spec_text: &str) -> Result<SubmitResponse, Status> {
        let req = SubmitRequest {
            spec: None,
            spec_text: spec_text.to_string(),
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.submit(req).await }
        })
        .await
    }

    /// `Get` of a query by name or id.
    pub async fn get(&mut self, query: &str) -> Result<QueryStatus, Status> {
        let req = QueryRef {
            query: query.to_string(),
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.get(req).await }
        })
        .await
    }

    /// The progress of every batch the driver still holds for `query`.
    pub async fn progress(
        &mut self,
        query: &str,
    ) -> Result<Vec<sluice_proto::BatchProgress>, Status> {
        let req = sluice_proto::ProgressRequest {
            query: query.to_string(),
            follow: false,
        };
        let mut stream = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.progress(req).await }
            })
            .await?;
        let mut out = Vec::new();
        while let Some(p) = stream.message().await? {
            out.push(p);
        }
        Ok(out)
    }

    pub async fn list(&mut self) -> Result<Vec<QueryStatus>, Status> {
        self.call(|mut c| async move { c.list(ListQueriesRequest {}).await })
            .await
            .map(|r| r.queries)
    }

    pub async fn stop(&mut self, query: &str) -> Result<QueryStatus, Status> {
        let req = QueryRef {
            query: query.to_string(),
        };
        self.call(|mut c| {
            let req = req.clone();
            async move { c.stop(req).await }
        })
        .await
    }

    pub async fn cluster_info(&mut self) -> Result<ClusterInfo, Status> {
        self.call(|mut c| async move { c.cluster(ClusterRequest {}).await })
            .await
    }

    /// Polls `Get` until `pred` holds and returns that status. Transient
    /// errors and NOT_FOUND (a driver still loading) are retried; other
    /// errors and the timeout panic with `what` and the last answer.
    pub async fn wait_for(
        &mut self,
        query: &str,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&QueryStatus) -> bool,
    ) -> QueryStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.get(query).await {
                Ok(status) if pred(&status) => return status,
                Ok(status) => format!("{status:#?}"),
                Err(e) if is_transient(&e) || e.code() == Code::NotFound => format!("{e:?}"),
                Err(e) => panic!("waiting for {query} to be {what}: Get failed: {e:?}"),
            };
            if Instant::now() >= deadline {
                panic!("{query} not {what} after {timeout:?}; last answer: {last}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for `state`; panics early if the query ends in another
    /// terminal state.
    pub async fn wait_state(
        &mut self,
        query: &str,
        state: QueryState,
        timeout: Duration,
    ) -> QueryStatus {
        let want = state as i32;
        let status = self
            .wait_for(query, state_name(want), timeout, |s| {
                s.state == want || s.state != QueryState::Running as i32
            })
            .await;
        assert_eq!(
            state_name(status.state),
            state_name(want),
            "{query} ended in another state: {status:#?}"
        );
        status
    }

    /// Waits until batch `batch` (or a later one) has committed.
    pub async fn wait_committed(&mut self, query: &str, batch: i64, timeout: Duration) -> i64 {
        self.wait_for(query, &format!("committed batch {batch}"), timeout, |s| {
            s.last_committed_batch >= batch
        })
        .await
        .last_committed_batch
    }
}
