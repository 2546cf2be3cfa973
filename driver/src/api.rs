//! `QueryService`: the users' API. Every call needs the leadership; a
//! standby answers `UNAVAILABLE` with the leader's address in the
//! `sluice-leader` metadata (see [`crate::error`]).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use sluice_common::spec::QuerySpec;
use sluice_proto as pb;
use sluice_proto::query_service_server::QueryService;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::error::DriverError;
use crate::query;
use crate::state::Driver;

pub struct QueryApi {
    pub driver: Arc<Driver>,
}

/// How long a progress call waits for a new leader to read the history
/// back before it sends what there is.
const HISTORY_WAIT: Duration = Duration::from_secs(10);

type ProgressStream = Pin<Box<dyn Stream<Item = Result<pb::BatchProgress, Status>> + Send>>;

#[tonic::async_trait]
impl QueryService for QueryApi {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let term = self.driver.ready_term()?;
        let req = request.into_inner();
        sluice_common::spec::check_size("spec_text", req.spec_text.len())
            .map_err(DriverError::from)?;
        let spec = match (req.spec.as_ref(), req.spec_text.trim()) {
            (_, text) if !text.is_empty() => QuerySpec::parse(text).map_err(DriverError::from)?,
            (Some(spec), _) => {
                sluice_common::spec::check_size("spec", prost::Message::encoded_len(spec))
                    .map_err(DriverError::from)?;
                QuerySpec::try_from(spec).map_err(DriverError::from)?
            }
            (None, _) => {
                return Err(DriverError::Invalid("spec: set `spec` or `spec_text`".into()).into());
            }
        };
        let entry = query::submit(&self.driver, &term, spec).await?;
        Ok(Response::new(pb::SubmitResponse {
            id: entry.id.clone(),
            name: entry.name.clone(),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::QueryRef>,
    ) -> Result<Response<pb::QueryStatus>, Status> {
        let term = self.driver.ready_term()?;
        let entry = term.queries.find(&request.into_inner().query)?;
        Ok(Response::new(entry.to_proto()))
    }

    async fn list(
        &self,
        _request: Request<pb::ListQueriesRequest>,
    ) -> Result<Response<pb::ListQueriesResponse>, Status> {
        let term = self.driver.ready_term()?;
        let queries = term.queries.list().iter().map(|e| e.to_proto()).collect();
        Ok(Response::new(pb::ListQueriesResponse { queries }))
    }

    async fn stop(
        &self,
        request: Request<pb::QueryRef>,
    ) -> Result<Response<pb::QueryStatus>, Status> {
        let term = self.driver.ready_term()?;
        let entry = query::stop(&self.driver, &term, &request.into_inner().query).await?;
        Ok(Response::new(entry.to_proto()))
    }

    async fn wait(
        &self,
        request: Request<pb::WaitRequest>,
    ) -> Result<Response<pb::QueryStatus>, Status> {
        let term = self.driver.ready_term()?;
        let req = request.into_inner();
        let entry = term.queries.find(&req.query)?;
        let mut rx = entry.watch();
        let done = async {
            loop {
                if rx.borrow_and_update().state.is_terminal() {
                    return Ok(());
                }
                if rx.changed().await.is_err() {
                    return Err(DriverError::ShuttingDown);
                }
            }
        };
        let cancel = term.cancel.clone();
        let timeout = if req.timeout_ms == 0 {
            Duration::MAX
        } else {
            Duration::from_millis(req.timeout_ms)
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(DriverError::NotLeader { leader: None }.into()),
            r = tokio::time::timeout(timeout, done) => {
                if let Ok(Err(e)) = r {
                    return Err(e.into());
                }
            }
        }
        Ok(Response::new(entry.to_proto()))
    }

    type ProgressStream = ProgressStream;

    async fn progress(
        &self,
        request: Request<pb::ProgressRequest>,
    ) -> Result<Response<Self::ProgressStream>, Status> {
        let term = self.driver.ready_term()?;
        let req = request.into_inner();
        let entry = term.queries.find(&req.query)?;
        // A new leader reads the history back in the background; a client
        // waits for it, up to a bound, and then gets what is there.
        if tokio::time::timeout(HISTORY_WAIT, entry.restored())
            .await
            .is_err()
        {
            tracing::warn!(query = %entry.name, "progress history not restored yet; sending what is there");
        }
        let (past, mut live) = entry.progress();
        let mut state = entry.watch();
        let (tx, rx) = mpsc::channel(64);
        let cancel = term.cancel.clone();
        term.tasks.spawn(async move {
            let mut last = None;
            for p in past {
                last = Some(p.batch_id);
                if tx.send(Ok(p)).await.is_err() {
                    return;
                }
            }
            if !req.follow {
                return;
            }
            // Follow until the query ends, then send what it committed last.
            let mut ended = state.borrow_and_update().state.is_terminal();
            loop {
                let next = if ended {
                    match live.try_recv() {
                        Ok(p) => Ok(p),
                        Err(_) => break,
                    }
                } else {
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => break,
                        _ = tx.closed() => break,
                        changed = state.changed() => {
                            ended = changed.is_err() || state.borrow().state.is_terminal();
                            continue;
                        }
                        n = live.recv() => n,
                    }
                };
                let batch = match next {
                    Ok(p) => vec![p],
                    // This client read too slowly and the live channel
                    // dropped records: refill from the history. What it no
                    // longer holds is reported on the next record sent.
                    Err(broadcast::error::RecvError::Lagged(_)) => entry.progress_after(last),
                    Err(broadcast::error::RecvError::Closed) => break,
                };
                for mut p in batch {
                    if last.is_some_and(|l| p.batch_id <= l) {
                        continue;
                    }
                    p.skipped_before = skipped(last, p.batch_id);
                    last = Some(p.batch_id);
                    if tx.send(Ok(p)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn cluster(
        &self,
        _request: Request<pb::ClusterRequest>,
    ) -> Result<Response<pb::ClusterInfo>, Status> {
        let term = self.driver.ready_term()?;
        let executors = term.scheduler.executors().await;
        let advertise = &self.driver.config.advertise;
        // The cluster view is informational: without etcd it shows no standbys.
        let standbys = match term.leadership.standbys(advertise).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the standby drivers");
                Vec::new()
            }
        };
        Ok(Response::new(pb::ClusterInfo {
            leader: advertise.clone(),
            epoch: term.epoch,
            standbys,
            executors,
            driver_id: self.driver.config.id.clone(),
        }))
    }
}

/// How many batches a progress stream skipped between the record it sent
/// last and `next`. Batch ids of one query are consecutive.
fn skipped(last: Option<u64>, next: u64) -> u64 {
    last.map_or(0, |l| next.saturating_sub(l + 1))
}

#[cfg(test)]
mod tests {
    use super::skipped;

    #[test]
    fn a_gap_in_batch_ids_is_counted() {
        assert_eq!(skipped(None, 7), 0);
        assert_eq!(skipped(Some(6), 7), 0);
        assert_eq!(skipped(Some(3), 7), 3);
    }
}
