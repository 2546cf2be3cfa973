//! Test support: a fake QueryService on a real port, as a leader (answers
//! Get and Progress from fixed data) or as a standby (every call fails with
//! UNAVAILABLE and a `sluice-leader` hint), to test the client's failover
//! and the progress stream without a driver. The client's network tests
//! are here too.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use sluice_proto::query_service_server::{QueryService, QueryServiceServer};
use sluice_proto::{
    BatchProgress, ClusterInfo, ClusterRequest, LEADER_METADATA_KEY, ListQueriesRequest,
    ListQueriesResponse, ProgressRequest, QueryRef, QueryState, QueryStatus, SubmitRequest,
    SubmitResponse, WaitRequest,
};
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct Fake {
    /// Some: a standby that points at this leader address.
    pub standby_of: Option<String>,
    pub state: QueryState,
    /// Batches 0..batches are in the progress history.
    pub batches: u64,
    /// Keep a follow stream open after the history (like the real driver).
    pub hold_open: bool,
}

impl Fake {
    pub fn leader(state: QueryState, batches: u64) -> Self {
        Fake {
            standby_of: None,
            state,
            batches,
            hold_open: true,
        }
    }

    fn check_leader(&self) -> Result<(), Status> {
        match &self.standby_of {
            None => Ok(()),
            Some(leader) => {
                let mut md = MetadataMap::new();
                let value = leader.parse().map_err(|_| Status::internal("bad hint"))?;
                md.insert(LEADER_METADATA_KEY, value);
                Err(Status::with_metadata(
                    tonic::Code::Unavailable,
                    "not the leader",
                    md,
                ))
            }
        }
    }

    fn status(&self, query: &str) -> QueryStatus {
        QueryStatus {
            id: format!("id-of-{query}"),
            name: query.to_string(),
            state: self.state as i32,
            last_committed_batch: i64::try_from(self.batches).unwrap_or(i64::MAX) - 1,
            ..Default::default()
        }
    }

    /// Serves on a free port until `stop`; returns the address.
    pub async fn serve(self, stop: CancellationToken) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tonic::transport::Server::builder()
            .add_service(QueryServiceServer::new(self))
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned());
        tokio::spawn(server);
        addr
    }
}

type ProgressStream = Pin<Box<dyn Stream<Item = Result<BatchProgress, Status>> + Send>>;

#[tonic::async_trait]
impl QueryService for Fake {
    async fn submit(&self, _: Request<SubmitRequest>) -> Result<Response<SubmitResponse>, Status> {
        self.check_leader()?;
        Err(Status::unimplemented("fake"))
    }

    async fn get(&self, r: Request<QueryRef>) -> Result<Response<QueryStatus>, Status> {
        self.check_leader()?;
        Ok(Response::new(self.status(&r.into_inner().query)))
    }

    async fn list(
        &self,
        _: Request<ListQueriesRequest>,
    ) -> Result<Response<ListQueriesResponse>, Status> {
        self.check_leader()?;
        Ok(Response::new(ListQueriesResponse {
            queries: vec![self.status("q")],
        }))
    }

    async fn stop(&self, r: Request<QueryRef>) -> Result<Response<QueryStatus>, Status> {
        self.check_leader()?;
        Ok(Response::new(self.status(&r.into_inner().query)))
    }

    async fn wait(&self, r: Request<WaitRequest>) -> Result<Response<QueryStatus>, Status> {
        self.check_leader()?;
        Ok(Response::new(self.status(&r.into_inner().query)))
    }

    type ProgressStream = ProgressStream;

    async fn progress(
        &self,
        r: Request<ProgressRequest>,
    ) -> Result<Response<ProgressStream>, Status> {
        self.check_leader()?;
        let req = r.into_inner();
        let items: Vec<Result<BatchProgress, Status>> = (0..self.batches)
            .map(|b| {
                Ok(BatchProgress {
                    name: req.query.clone(),
                    batch_id: b,
                    num_input_rows: 10,
                    ..Default::default()
                })
            })
            .collect();
        let history = futures::stream::iter(items);
        let stream: ProgressStream = if req.follow && self.hold_open {
            Box::pin(history.chain(futures::stream::pending()))
        } else {
            Box::pin(history)
        };
        Ok(Response::new(stream))
    }

    async fn cluster(&self, _: Request<ClusterRequest>) -> Result<Response<ClusterInfo>, Status> {
        self.check_leader()?;
        Err(Status::unimplemented("fake"))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::client::{CliError, Client};

    #[tokio::test]
    async fn an_unreachable_driver_gives_up_with_a_clear_message() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = Client::new(vec![format!("127.0.0.1:{port}")]).unwrap();
        let deadline = Instant::now() + Duration::from_millis(300);
        let err = c
            .call_until(Some(deadline), |mut rpc| async move {
                rpc.list(sluice_proto::ListQueriesRequest {}).await
            })
            .await
            .unwrap_err();
        assert!(matches!(err, CliError::GaveUp { .. }), "{err}");
        assert!(err.to_string().contains("cannot connect"), "{err}");
    }
}
