//! Sinks on the driver: what a writing task's report must hold for the
//! query's sink kind, checked before its batch may commit, and what it
//! says was written. Each kind's submit checks and commit are its own
//! module's ([`kafka`]: the topic, the transactional id prefix and the
//! second phase of an exactly-once batch); the file sink's manifests are
//! `sluice_common::sink`'s.

pub mod discard;
pub mod kafka;

use sluice_common::spec::SinkSpec;
use sluice_proto as pb;

use crate::error::DriverError;

/// An executor's report is checked where it can be: the rows a task says
/// it wrote are the rows of the files it lists, so a batch never commits
/// rows that no file holds (a faulty or rogue executor's report); a task
/// of the discard or the Kafka sink lists no file; a task that wrote
/// records with exactly_once reports its transaction.
pub fn check_reports(
    batch: u64,
    writers: &[pb::TaskOutput],
    sink: &SinkSpec,
) -> Result<(), DriverError> {
    let (files, discard, kafka) = match sink {
        SinkSpec::Files(_) => (true, false, None),
        SinkSpec::Discard(_) => (false, true, None),
        SinkSpec::Kafka(k) => (false, false, Some(k.delivery)),
    };
    let name = match sink {
        SinkSpec::Files(_) => "writes files",
        SinkSpec::Discard(_) => "is discard",
        SinkSpec::Kafka(_) => "is Kafka",
    };
    for (task, o) in writers.iter().enumerate() {
        let bad = (!files && !files_written(o).is_empty())
            || (!discard && discard::bytes(o) > 0)
            || (kafka.is_none() && kafka_written(o).is_some());
        if bad {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported {} files, {} discarded \
                 bytes and Kafka records {}, but the sink {name}",
                files_written(o).len(),
                discard::bytes(o),
                if kafka_written(o).is_some() {
                    "written"
                } else {
                    "none"
                }
            )));
        }
        let exactly_once = kafka == Some(sluice_common::spec::Delivery::ExactlyOnce);
        let txn = kafka_written(o).and_then(|k| k.transaction.as_ref());
        if exactly_once && o.rows > 0 && txn.is_none() {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported {} rows written to Kafka \
                 without the transaction that holds them",
                o.rows
            )));
        }
        let in_files: u64 = files_written(o).iter().map(|f| f.rows).sum();
        if files && o.rows != in_files {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported {} rows written, but the files \
                 it lists hold {in_files}",
                o.rows
            )));
        }
    }
    Ok(())
}

/// The files a task's report lists (none for another sink's report).
pub fn files_written(o: &pb::TaskOutput) -> &[pb::SinkFile] {
    match &o.sink {
        Some(pb::task_output::Sink::Files(f)) => &f.files,
        _ => &[],
    }
}

/// The bytes a task's report says it wrote (or, for the discard sink,
/// counted), whatever its sink's kind.
pub fn bytes(o: &pb::TaskOutput) -> u64 {
    match &o.sink {
        Some(pb::task_output::Sink::Files(f)) => f.files.iter().map(|f| f.bytes).sum(),
        Some(pb::task_output::Sink::Discard(_)) => discard::bytes(o),
        Some(pb::task_output::Sink::Kafka(k)) => k.bytes,
        None => 0,
    }
}

/// What a task's report says it wrote to Kafka (none for another sink's).
pub fn kafka_written(o: &pb::TaskOutput) -> Option<&pb::KafkaWritten> {
    match &o.sink {
        Some(pb::task_output::Sink::Kafka(k)) => Some(k),
        _ => None,
    }
}
