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

mod commit;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{PreparedTransaction, QueryCheckpoint};
use sluice_common::spec::{
    Delivery, KafkaSinkSpec, OutputMode, QuerySpec, SinkRecordFormat, SinkSpec,
};
use sluice_kafka::Kafka;
use sluice_proto as pb;
use tracing::debug;

use super::{Committer, Ended, SinkIo, SinkKind, Written};
use crate::config::DriverConfig;
use crate::error::DriverError;

/// The Kafka sink of a query's spec.
pub(super) struct Kind<'s>(pub &'s KafkaSinkSpec);

impl SinkKind for Kind<'_> {
    fn describe(&self) -> &'static str {
        "is Kafka"
    }

    fn written(&self, report: &pb::task_output::Sink, into: &mut Written) -> bool {
        let pb::task_output::Sink::Kafka(k) = report else {
            return false;
        };
        into.bytes += k.bytes;
        into.longest_open_ms = into.longest_open_ms.max(k.open_ms);
        if let Some(t) = &k.transaction {
            into.transactions.push(PreparedTransaction {
                transactional_id: t.transactional_id.clone(),
                producer_id: t.producer_id,
                producer_epoch: t.producer_epoch as i16,
            });
        }
        true
    }

    fn check_spec(
        &self,
        spec: &QuerySpec,
        others: &[(String, QuerySpec)],
        _checkpoint_root: &str,
    ) -> Result<(), DriverError> {
        check_prefix(spec, others.iter().map(|(n, s)| (n.as_str(), s)))
    }

    fn probe<'a>(
        &'a self,
        config: &'a DriverConfig,
        deadline: Duration,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(check_topic(self.0, &config.secrets, deadline))
    }

    fn check_output(&self, output: &SchemaRef, _mode: OutputMode) -> Result<(), DriverError> {
        check_columns(self.0, output)
    }

    /// A task that wrote records with exactly_once reports its transaction.
    fn check_report(&self, batch: u64, task: usize, o: &pb::TaskOutput) -> Result<(), DriverError> {
        let txn = match &o.sink {
            Some(pb::task_output::Sink::Kafka(k)) => k.transaction.as_ref(),
            _ => None,
        };
        if self.0.delivery == Delivery::ExactlyOnce && o.rows > 0 && txn.is_none() {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported {} rows written to Kafka \
                 without the transaction that holds them",
                o.rows
            )));
        }
        Ok(())
    }

    fn open<'a>(
        &'a self,
        io: &'a SinkIo,
    ) -> BoxFuture<'a, Result<Box<dyn Committer>, DriverError>> {
        let committer = commit::Kafka {
            sink: self.0.clone(),
            exactly_once: self.0.delivery == Delivery::ExactlyOnce,
            io: io.clone(),
        };
        Box::pin(async { Ok(Box::new(committer) as Box<dyn Committer>) })
    }

    /// A batch whose transactions are recorded commits as it ran: its
    /// records are in the topic, or will be once they are committed.
    fn reopen<'a>(
        &'a self,
        _config: &'a DriverConfig,
        qc: &'a QueryCheckpoint,
        batch: u64,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(async move { Ok(qc.transactions(batch).await?.is_some()) })
    }

    fn ended<'a>(&'a self, end: &'a Ended<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if end.stopped && self.0.delivery == Delivery::ExactlyOnce {
                commit::complete_stopped(self.0, &end.config.secrets, end.qc).await;
            }
        })
    }
}

/// The query's Kafka sink when it writes with transactions.
fn exactly_once(spec: &QuerySpec) -> Option<&KafkaSinkSpec> {
    match &spec.sink {
        SinkSpec::Kafka(k) if k.delivery == Delivery::ExactlyOnce => Some(k),
        _ => None,
    }
}

/// At submit: the output topic exists (its partitions are where records
/// go). Refused by name otherwise; a broker that cannot be reached is
/// named too, and the submit may be tried again.
async fn check_topic(
    k: &KafkaSinkSpec,
    secrets: &sluice_common::secrets::Secrets,
    deadline: Duration,
) -> Result<(), DriverError> {
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
fn check_prefix<'a>(
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

/// The Kafka sink's `key` names an output column of a scalar type, and a
/// `raw` sink has a `value` column of bytes or text.
fn check_columns(sink: &KafkaSinkSpec, output: &SchemaRef) -> Result<(), DriverError> {
    let names = || {
        let names: Vec<&str> = output.fields().iter().map(|f| f.name().as_str()).collect();
        names.join(", ")
    };
    if let Some(key) = &sink.key {
        let Ok(field) = output.field_with_name(key) else {
            return Err(DriverError::Invalid(format!(
                "sink.kafka.key: {key:?} is not an output column of the query; its columns are {}",
                names()
            )));
        };
        if field.data_type().is_nested() {
            return Err(DriverError::Invalid(format!(
                "sink.kafka.key: column {key:?} is {}, not a scalar type",
                field.data_type()
            )));
        }
    }
    if sink.format == SinkRecordFormat::Raw {
        use arrow_schema::DataType::*;
        match output.field_with_name("value").map(|f| f.data_type()) {
            Ok(Binary | LargeBinary | BinaryView | Utf8 | LargeUtf8 | Utf8View) => {}
            Ok(t) => {
                return Err(DriverError::Invalid(format!(
                    "sink.kafka.format: raw writes the `value` column's bytes, but it is {t}; \
                     cast it to a string or binary, or use format json"
                )));
            }
            Err(_) => {
                return Err(DriverError::Invalid(format!(
                    "sink.kafka.format: raw writes the `value` column, which the query does not \
                     have; its columns are {}",
                    names()
                )));
            }
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
