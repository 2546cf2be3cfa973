//! `PeerService`: what a standby watches on the leader. `WatchTerm` sends
//! the leader's epoch when it opens, then holds the stream open for as long
//! as the term lasts. A term that ends while the process lives on sends one
//! last event, `ending` (with `resigned` for a handover, sent as the resign
//! begins), and closes the stream. A stream that breaks without it means the process or its
//! connection went away: the standby then probes the port (see
//! `leader::detect`).
//!
//! ```text
//!  standby ── WatchTerm ──► leader: TermEvent{epoch} ... [TermEvent{ending, resigned}] EOF
//! ```
//! The stream grants nothing and carries nothing secret: it needs no
//! credentials (`auth::need` keeps it open).

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use sluice_proto as pb;
use sluice_proto::peer_service_server::PeerService;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::state::Driver;

type TermStream = Pin<Box<dyn Stream<Item = Result<pb::TermEvent, Status>> + Send>>;

pub struct PeerApi {
    pub driver: Arc<Driver>,
}

#[tonic::async_trait]
impl PeerService for PeerApi {
    type WatchTermStream = TermStream;

    async fn watch_term(
        &self,
        request: Request<pb::WatchTermRequest>,
    ) -> Result<Response<TermStream>, Status> {
        // A standby answers UNAVAILABLE with the leader hint, as every call.
        let term = self.driver.term()?;
        let watcher = request.into_inner().driver_id;
        let first = pb::TermEvent {
            epoch: term.epoch,
            driver_id: self.driver.config.id.clone(),
            ..Default::default()
        };
        // Two events at most: the channel never blocks a sender.
        let (tx, rx) = mpsc::channel(2);
        tx.try_send(Ok(first.clone()))
            .expect("a new channel of two has room");
        let (cancel, lease) = (term.cancel.clone(), term.leadership.lease());
        // A resign is announced before it reaches etcd, so that the
        // standby knows the cause before it is elected.
        let resigning = lease
            .as_ref()
            .map_or_else(CancellationToken::new, |l| l.resigning());
        tracing::debug!(epoch = term.epoch, watcher = %watcher, "a standby watches this term");
        term.tasks.spawn(async move {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                _ = resigning.cancelled() => {}
                _ = tx.closed() => return,
            }
            let last = pb::TermEvent {
                ending: true,
                resigned: lease.is_some_and(|l| l.is_resigned()),
                ..first
            };
            // The watcher may be gone already; nothing to do then.
            let _ = tx.try_send(Ok(last));
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
