//! The Kafka sink on the driver: the topic and the transactional id
//! prefix checked at submit, and the
//! second phase of a batch's exactly-once commit (docs/design-notes.md,
//! "Exactly-once into Kafka").
//!
//! ```text
//!  tasks: write in transactions, flush, report (id, producer id, epoch)   ─ phase 1
//!  driver: transactions/N (create-only) ─► EndTxn(commit) each ─► commits/N ─ phase 2
//!  restart: transactions/N and no commits/N ─► EndTxn(commit) each again (idempotent)
//!           no transactions/N               ─► batch N runs again; its tasks'
//!                                              InitProducerId aborts what the old ones wrote
//! ```
//!
//! Invariant: `transactions/N` is written only after every task of batch N
//! succeeded, and no transaction is committed before it is durable; so a
//! batch's transactions are either all committed (the record exists) or
//! all aborted (it does not, and the batch runs again).

use std::time::{Duration, Instant};

use futures::TryFutureExt;
use futures::future::try_join_all;
use sluice_common::checkpoint::{Log, PreparedTransaction, QueryCheckpoint, TransactionsRecord};
use sluice_common::secrets::Secrets;
use sluice_common::spec::{Delivery, KafkaSinkSpec, QuerySpec, SinkSpec};
use sluice_kafka::{Kafka, TxnEnd, TxnId, end_transaction};
use tracing::{debug, info, warn};

use crate::error::DriverError;
use crate::query::ctx::Ctx;

/// The deadline of one call to the brokers.
const DEADLINE: Duration = Duration::from_secs(10);

/// The query's Kafka sink when it writes with transactions.
pub fn exactly_once(spec: &QuerySpec) -> Option<&KafkaSinkSpec> {
    match &spec.sink {
        SinkSpec::Kafka(k) if k.delivery == Delivery::ExactlyOnce => Some(k),
        _ => None,
    }
}

/// At submit: the output topic exists (its partitions are where records
/// go). Refused by name otherwise; a broker that cannot be reached is
/// named too, and the submit may be tried again.
pub async fn check_topic(
    spec: &QuerySpec,
    secrets: &Secrets,
    deadline: Duration,
) -> Result<(), DriverError> {
    let SinkSpec::Kafka(k) = &spec.sink else {
        return Ok(());
    };
    let kafka = Kafka::connect_secure(
        &k.bootstrap_servers,
        &k.security,
        secrets,
        "sink.kafka.security",
        deadline,
    )
    .await
    .map_err(sink_error)?;
    let found = kafka.partition_count(&k.topic).await;
    if let Err(e) = kafka.close().await {
        debug!(error = %e, "closing the Kafka connection failed");
    }
    found.map(|_| ()).map_err(sink_error)
}

/// At submit, before any broker is asked: no other query that exists
/// (in any state: a stopped query may run again) writes with the same
/// effective `transactional_id_prefix`. Transactional ids are
/// `<prefix>-<task partition>`, so two queries with one prefix would
/// fence each other's transactions. `others` are the existing queries'
/// names and specs.
pub fn check_prefix<'a>(
    spec: &QuerySpec,
    others: impl IntoIterator<Item = (&'a str, &'a QuerySpec)>,
) -> Result<(), DriverError> {
    let Some(sink) = exactly_once(spec) else {
        return Ok(());
    };
    let prefix = sink.transactional_id_prefix(&spec.name);
    for (name, other) in others {
        if name == spec.name {
            continue;
        }
        let Some(theirs) = exactly_once(other) else {
            continue;
        };
        if theirs.transactional_id_prefix(name) == prefix {
            let default = match sink.transactional_id_prefix {
                Some(_) => "",
                None => " (the default, sluice-<query>)",
            };
            return Err(DriverError::Invalid(format!(
                "sink.kafka.transactional_id_prefix: {prefix:?}{default} is the prefix of query \
                 {name:?}'s exactly-once Kafka sink too; the tasks of two queries with one prefix \
                 would fence each other's transactions: give this query another \
                 transactional_id_prefix"
            )));
        }
    }
    Ok(())
}

fn sink_error(e: sluice_kafka::Error) -> DriverError {
    if e.is_retryable() {
        DriverError::from(e)
    } else {
        DriverError::Invalid(format!("sink.kafka: {e}"))
    }
}

/// Phase 2 of a batch: records the transactions its tasks reported (or
/// takes the record a driver before this one wrote), then commits each.
/// Returns once every one is committed.
pub async fn commit(ctx: &Ctx, prepared: Prepared) -> Result<Committed, DriverError> {
    let Some(sink) = exactly_once(&ctx.spec) else {
        return Ok(Committed::default());
    };
    let record = match prepared {
        Prepared::Reported(r) => write_record(ctx, r).await?,
        Prepared::Recorded(r) => r,
    };
    let batch = record.batch_id;
    hold(ctx, "prepared", batch).await?;
    let t = Instant::now();
    let ends = record
        .transactions
        .iter()
        .map(|txn| end(ctx, sink, batch, txn));
    try_join_all(ends).await?;
    let took = t.elapsed();
    hold(ctx, "committed", batch).await?;
    Ok(Committed {
        committed: record.transactions.len() as u64,
        took,
    })
}

/// Tests only (`--test-hold-dir`): holds batch `batch` at `point` while
/// the file `hold-<point>` is there, having announced it with the file
/// `held-<point>-<batch>`; a test kills the driver there.
async fn hold(ctx: &Ctx, point: &str, batch: u64) -> Result<(), DriverError> {
    let Some(dir) = &ctx.driver.config.test_hold_dir else {
        return Ok(());
    };
    let hold = dir.join(format!("hold-{point}"));
    if !hold.exists() {
        return Ok(());
    }
    std::fs::write(dir.join(format!("held-{point}-{batch}")), b"")?;
    warn!(point, batch, "held for a test");
    while hold.exists() {
        ctx.sleep(Duration::from_millis(20)).await?;
    }
    Ok(())
}

/// A batch's prepared transactions.
pub enum Prepared {
    /// As its tasks just reported them: to be recorded.
    Reported(TransactionsRecord),
    /// As a driver before this one recorded them.
    Recorded(TransactionsRecord),
}

/// `transactions/N`, when a driver before this one wrote it: batch N's
/// tasks are not run again, its transactions are committed again.
pub async fn recorded(ctx: &Ctx, batch: u64) -> Result<Option<TransactionsRecord>, DriverError> {
    if exactly_once(&ctx.spec).is_none() {
        return Ok(None);
    }
    ctx.storage("read transactions", || ctx.qc.transactions(batch))
        .await
}

/// After the query stopped: a batch whose `transactions/N` is written is
/// committed in Kafka, even when the stop interrupted its commits (the
/// record is the batch's commit point, as a sink manifest is a file
/// batch's). Each recorded transaction of a batch without `commits/N` is
/// committed. A failure is logged as an error naming the batch: a stopped
/// query does not run again, so its records may be missing.
pub async fn complete_stopped(spec: &QuerySpec, secrets: &Secrets, qc: &QueryCheckpoint) {
    let Some(sink) = exactly_once(spec) else {
        return;
    };
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

/// What phase 2 did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Committed {
    pub committed: u64,
    /// From the record being durable to the last commit's answer.
    pub took: Duration,
}

/// Writes `transactions/N`. One already there is another driver's, which
/// prepared batch N with tasks of its own: the tasks of this driver fenced
/// those transactions, so whether their records were committed first
/// cannot be known here. The query fails, loudly, rather than guess.
async fn write_record(
    ctx: &Ctx,
    record: TransactionsRecord,
) -> Result<TransactionsRecord, DriverError> {
    let batch = record.batch_id;
    let (stored, ours) = ctx
        .storage("write transactions", || ctx.qc.write_transactions(&record))
        .await?;
    if !ours {
        ctx.driver.confirm_leadership(&ctx.term).await?;
        return Err(DriverError::Internal(format!(
            "batch {batch}: driver epoch {} prepared its Kafka transactions while this driver \
             (epoch {}) ran it again; the records it wrote may or may not be in topic {:?}",
            stored.epoch,
            ctx.term.epoch,
            exactly_once(&ctx.spec).map_or("", |k| k.topic.as_str())
        )));
    }
    Ok(stored)
}

/// Commits one prepared transaction, retrying while the coordinator cannot
/// answer. A transaction the coordinator no longer has open under that
/// epoch was aborted (its timeout passed, or a producer of the same id
/// took over): its records are not in the topic, and the query fails.
async fn end(
    ctx: &Ctx,
    sink: &KafkaSinkSpec,
    batch: u64,
    txn: &PreparedTransaction,
) -> Result<(), DriverError> {
    let id = txn_id(txn);
    let (servers, secrets) = (&sink.bootstrap_servers, &ctx.driver.config.secrets);
    let ended = ctx
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, sink: &str) -> QuerySpec {
        let yaml = format!(
            "name: {name}\nsource: {{rate: {{rows_per_second: 10, partitions: 1}}}}\n\
             sink: {{kafka: {{bootstrap_servers: '127.0.0.1:9092', topic: out{sink}}}}}\n"
        );
        QuerySpec::parse(&yaml).unwrap()
    }

    fn check(new: &QuerySpec, others: &[&QuerySpec]) -> Result<(), DriverError> {
        check_prefix(new, others.iter().map(|o| (o.name.as_str(), *o)))
    }

    #[test]
    fn two_queries_may_not_share_a_transactional_id_prefix() {
        let a = spec("a", "");
        let named = spec("b", ", transactional_id_prefix: shared");
        // Another query's default prefix, and an explicit one, each taken.
        for (new, taken) in [
            (spec("c", ", transactional_id_prefix: sluice-a"), &a),
            (spec("c", ", transactional_id_prefix: shared"), &named),
        ] {
            let e = check(&new, &[&a, &named]).unwrap_err();
            assert!(matches!(e, DriverError::Invalid(_)), "{e:?}");
            let m = e.to_string();
            assert!(
                m.starts_with("sink.kafka.transactional_id_prefix: ")
                    && m.contains(&format!("query {:?}", taken.name)),
                "{m}"
            );
        }
        let e = check(
            &spec("shared", ""),
            &[&spec("x", ", transactional_id_prefix: sluice-shared")],
        );
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("(the default, sluice-<query>)"),
        );
        // Distinct prefixes, at-least-once sinks and the query itself pass.
        check(&spec("c", ""), &[&a, &named]).unwrap();
        check(&a, &[&a]).unwrap();
        let plain = spec("c", ", delivery: at_least_once");
        check(&plain, &[&spec("d", ", transactional_id_prefix: sluice-c")]).unwrap();
        let other = spec("d", ", delivery: at_least_once");
        check(&spec("c", ", transactional_id_prefix: sluice-d"), &[&other]).unwrap();
    }
}
