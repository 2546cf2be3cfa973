//! Phase 2 of an exactly-once Kafka batch: its tasks' transactions
//! recorded in `transactions/N`, then committed; again after a crash; and
//! completed after a stop (see [`super`] for the protocol).

use std::time::{Duration, Instant};

use futures::TryFutureExt;
use futures::future::{BoxFuture, try_join_all};
use sluice_common::checkpoint::{Log, PreparedTransaction, QueryCheckpoint, TransactionsRecord};
use sluice_common::secrets::Secrets;
use sluice_common::spec::KafkaSinkSpec;
use sluice_kafka::{TxnEnd, TxnId, end_transaction};
use tracing::{debug, info, warn};

use crate::error::DriverError;
use crate::failpoint::Point;
use crate::sink::{Committed, Committer, Prepared, SinkIo, Written};

/// The deadline of one call to the brokers.
const DEADLINE: Duration = Duration::from_secs(10);

/// A running query's Kafka sink. Its tasks write and flush; with
/// `exactly_once`, the driver commits their transactions.
pub(super) struct Kafka {
    pub sink: KafkaSinkSpec,
    pub exactly_once: bool,
    pub io: SinkIo,
}

impl Committer for Kafka {
    /// `transactions/N`, when a driver before this one wrote it: batch N's
    /// tasks are not run again, its transactions are committed again.
    fn recorded(
        &self,
        batch: u64,
    ) -> BoxFuture<'_, Result<Option<TransactionsRecord>, DriverError>> {
        Box::pin(async move {
            if !self.exactly_once {
                return Ok(None);
            }
            let qc = self.io.checkpoint();
            self.io
                .storage("read transactions", || qc.transactions(batch))
                .await
        })
    }

    /// Records the transactions the batch's tasks reported (or takes the
    /// record a driver before this one wrote), then commits each. Returns
    /// once every one is committed.
    fn commit<'a>(
        &'a self,
        _batch: u64,
        _written: &'a Written,
        prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        Box::pin(async move {
            if !self.exactly_once {
                return Ok(Committed::default());
            }
            let record = match prepared {
                Prepared::Reported(r) => self.write_record(r).await?,
                Prepared::Recorded(r) => r,
            };
            let batch = record.batch_id;
            self.io.hold(Point::KafkaPrepared, batch).await?;
            let t = Instant::now();
            let ends = record.transactions.iter().map(|txn| self.end(batch, txn));
            try_join_all(ends).await?;
            let took = t.elapsed();
            self.io.hold(Point::KafkaCommitted, batch).await?;
            Ok(Committed {
                transactions: Some((record.transactions.len() as u64, took)),
            })
        })
    }
}

impl Kafka {
    /// Writes `transactions/N`. One already there is another driver's,
    /// which prepared batch N with tasks of its own: the tasks of this
    /// driver fenced those transactions, so whether their records were
    /// committed first cannot be known here. The query fails, loudly,
    /// rather than guess.
    async fn write_record(
        &self,
        record: TransactionsRecord,
    ) -> Result<TransactionsRecord, DriverError> {
        let batch = record.batch_id;
        let qc = self.io.checkpoint();
        let (stored, ours) = self
            .io
            .storage("write transactions", || qc.write_transactions(&record))
            .await?;
        if !ours {
            self.io.confirm_leadership().await?;
            return Err(DriverError::Internal(format!(
                "batch {batch}: driver epoch {} prepared its Kafka transactions while this driver \
                 (epoch {}) ran it again; the records it wrote may or may not be in topic {:?}",
                stored.epoch,
                self.io.epoch(),
                self.sink.topic
            )));
        }
        Ok(stored)
    }

    /// Commits one prepared transaction, retrying while the coordinator
    /// cannot answer. A transaction the coordinator no longer has open
    /// under that epoch was aborted (its timeout passed, or a producer of
    /// the same id took over): its records are not in the topic, and the
    /// query fails.
    async fn end(&self, batch: u64, txn: &PreparedTransaction) -> Result<(), DriverError> {
        let (sink, id) = (&self.sink, txn_id(txn));
        let (servers, secrets) = (&sink.bootstrap_servers, &self.io.config().secrets);
        let ended = self
            .io
            .storage("commit a Kafka transaction", || {
                end_transaction(servers, &sink.security, secrets, &id, true, DEADLINE).err_into()
            })
            .await?;
        match ended {
            TxnEnd::Ended => {
                debug!(batch, transactional_id = %id.transactional_id, "transaction committed");
                Ok(())
            }
            TxnEnd::Fenced { code } => {
                warn!(batch, transactional_id = %id.transactional_id, code, "transaction was aborted before its commit");
                Err(DriverError::FailedPrecondition(format!(
                    "batch {batch}: Kafka transaction {:?} (producer {} epoch {}) was aborted before the \
                     driver could commit it (error code {code}): its transaction_timeout_ms ({} ms) \
                     passed, or another producer took the id; its records are not in topic {:?}",
                    id.transactional_id,
                    id.producer_id,
                    id.producer_epoch,
                    sink.transaction_timeout_ms(),
                    sink.topic
                )))
            }
        }
    }
}

/// After the query stopped: a batch whose `transactions/N` is written is
/// committed in Kafka, even when the stop interrupted its commits (the
/// record is the batch's commit point, as a sink manifest is a file
/// batch's). Each recorded transaction of a batch without `commits/N` is
/// committed. A failure is logged as an error naming the batch: a stopped
/// query does not run again, so its records may be missing.
pub(super) async fn complete_stopped(
    sink: &KafkaSinkSpec,
    secrets: &Secrets,
    qc: &QueryCheckpoint,
) {
    let done = async {
        let Some(planned) = qc.latest(Log::Offsets).await? else {
            return Ok(0);
        };
        let first = qc.latest(Log::Commits).await?.map_or(0, |c| c + 1);
        let mut committed = 0;
        for batch in first..=planned {
            let Some(record) = qc.transactions(batch).await? else {
                continue;
            };
            for txn in &record.transactions {
                let ended = end_transaction(
                    &sink.bootstrap_servers,
                    &sink.security,
                    secrets,
                    &txn_id(txn),
                    true,
                    DEADLINE,
                )
                .await?;
                if ended != TxnEnd::Ended {
                    warn!(batch, transactional_id = %txn.transactional_id, ?ended, "a transaction of the stopped query was aborted before its commit");
                }
                committed += 1;
            }
        }
        Ok::<_, sluice_common::Error>(committed)
    };
    match done.await {
        Ok(0) => {}
        Ok(n) => info!(
            transactions = n,
            "the stopped query's recorded transactions committed"
        ),
        Err(e) => {
            tracing::error!(error = %e, topic = %sink.topic, "cannot commit the stopped query's recorded transactions: the records of its last batch may be missing from the topic")
        }
    }
}

fn txn_id(txn: &PreparedTransaction) -> TxnId {
    TxnId {
        transactional_id: txn.transactional_id.clone(),
        producer_id: txn.producer_id,
        producer_epoch: txn.producer_epoch,
    }
}
