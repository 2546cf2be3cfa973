//! Sinks on the driver: each checks its spec at submit, checks what its
//! tasks report, makes a batch's output visible before `commits/N`,
//! completes or abandons what a stopped query left, and deletes what
//! readers no longer need.
//!
//! ```text
//!  submit:  check_spec(others) ─► probe ─► … SQL checked ─► check_output(columns)
//!  run:     open(io) ─► Committer
//!           batch N: recorded(N)? ─► tasks ─► check_report each ─► commit(N) ─► commits/N ─► after_commit(N)
//!  restart: reopen(N)      ended: ended(stopped)
//! ```
//!
//! A new sink adds its spec and proto message, one module here with its
//! [`SinkKind`], registered once in [`kind`], and its writer on the
//! executor. A sink touches its query only through [`SinkIo`].

pub mod discard;
pub mod files;
mod io;
pub mod kafka;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{QueryCheckpoint, TransactionsRecord};
use sluice_common::sink::SinkFile;
use sluice_common::spec::{QuerySpec, SinkSpec};
use sluice_proto as pb;

use crate::config::DriverConfig;
use crate::error::DriverError;
pub use io::SinkIo;

/// The deadline of a submit's probe of the place a sink writes to.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// One kind of sink: what a submit checks of it, what its tasks' reports
/// must hold, and how a runner opens it. Each kind registers once, in
/// [`kind`].
trait SinkKind: Send + Sync {
    /// How errors name the kind: "writes files", "is discard", "is Kafka".
    fn describe(&self) -> &'static str;

    /// The kind a task's report of this sink holds (see [`reported`]).
    fn reports(&self) -> Reported;

    /// At submit, before the sink is reached: the spec against the
    /// queries that exist (`others`: their names and specs) and the
    /// checkpoint root. May read the local disk; runs off the async
    /// workers.
    fn check_spec(
        &self,
        _spec: &QuerySpec,
        _others: &[(String, QuerySpec)],
        _checkpoint_root: &str,
    ) -> Result<(), DriverError> {
        Ok(())
    }

    /// At submit: the place the sink writes to answers, within `deadline`.
    fn probe<'a>(
        &'a self,
        _config: &'a DriverConfig,
        _deadline: Duration,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async { Ok(()) })
    }

    /// At submit, once the SQL is checked: its output columns suit the sink.
    fn check_output(&self, _output: &SchemaRef) -> Result<(), DriverError> {
        Ok(())
    }

    /// What one task's report must hold beyond its kind: `task` is its
    /// index among the batch's writers.
    fn check_report(
        &self,
        _batch: u64,
        _task: usize,
        _o: &pb::TaskOutput,
    ) -> Result<(), DriverError> {
        Ok(())
    }

    /// The sink of a running query.
    fn open<'a>(&'a self, io: &'a SinkIo)
    -> BoxFuture<'a, Result<Box<dyn Committer>, DriverError>>;

    /// At the restart of a stopped query whose batch `batch` was planned
    /// and not committed: whether that batch's output had been made
    /// visible before the stop (it then cannot run with another plan).
    fn reopen<'a>(
        &'a self,
        _config: &'a DriverConfig,
        _batch: u64,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(async { Ok(false) })
    }

    /// After the query's runner ended for good: it finished, or it was
    /// `stopped` (its planned, uncommitted batches never run again).
    fn ended<'a>(&'a self, _end: &'a Ended<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// A running query's sink: the second phase of each batch's commit.
pub trait Committer: Send + Sync {
    /// What a driver before this one prepared of batch `batch`: with a
    /// record, the batch's tasks do not run again and its record is
    /// committed as it is (replay after a crash).
    fn recorded(
        &self,
        _batch: u64,
    ) -> BoxFuture<'_, Result<Option<TransactionsRecord>, DriverError>> {
        Box::pin(async { Ok(None) })
    }

    /// Makes batch `batch`'s output visible, before `commits/N`: a replay
    /// of N does the same again and adopts what is there.
    fn commit<'a>(
        &'a self,
        batch: u64,
        files: &'a [SinkFile],
        prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>>;

    /// After `commits/N` of batch `committed`: starts the background
    /// deletions that are due; never on the batch's critical path.
    fn after_commit(&self, _committed: u64) {}
}

/// A batch's prepared outcome, for the sink's commit.
pub enum Prepared {
    /// As its tasks just reported it: to be recorded.
    Reported(TransactionsRecord),
    /// As a driver before this one recorded it.
    Recorded(TransactionsRecord),
}

/// What a sink's commit did, for the batch's progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct Committed {
    /// The Kafka transactions committed, and how long from their record
    /// being durable to the last commit's answer (an exactly-once Kafka
    /// sink only).
    pub transactions: Option<(u64, Duration)>,
}

/// What a sink may touch after its query's runner ended.
pub struct Ended<'a> {
    pub config: &'a DriverConfig,
    pub qc: &'a QueryCheckpoint,
    pub epoch: u64,
    pub stopped: bool,
}

/// The kind a task's report holds something of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reported {
    Files,
    Discard,
    Kafka,
}

/// The registry of sink kinds: the one place that matches on a sink's
/// spec.
fn kind(spec: &SinkSpec) -> Box<dyn SinkKind + '_> {
    match spec {
        SinkSpec::Files(s) => Box::new(files::Kind(s)),
        SinkSpec::Discard(_) => Box::new(discard::Kind),
        SinkSpec::Kafka(s) => Box::new(kafka::Kind(s)),
    }
}

/// At submit: the sink's spec against the existing queries (`others`)
/// and the checkpoint root, then a probe of the place it writes to. A
/// refusal names the field.
pub async fn check(
    config: &DriverConfig,
    spec: &QuerySpec,
    others: Vec<(String, QuerySpec)>,
) -> Result<(), DriverError> {
    let (checked, root) = (spec.clone(), config.checkpoint_root.clone());
    tokio::task::spawn_blocking(move || kind(&checked.sink).check_spec(&checked, &others, &root))
        .await
        .map_err(|e| DriverError::Internal(format!("the check of the sink panicked: {e}")))??;
    kind(&spec.sink).probe(config, PROBE_DEADLINE).await
}

/// At submit, once the SQL is checked: the output columns suit the sink.
pub fn check_output(spec: &QuerySpec, output: &SchemaRef) -> Result<(), DriverError> {
    kind(&spec.sink).check_output(output)
}

/// Opens the sink of a running query.
pub async fn open(io: &SinkIo, spec: &SinkSpec) -> Result<Box<dyn Committer>, DriverError> {
    kind(spec).open(io).await
}

/// At the restart of a stopped query: whether its uncommitted batch
/// `batch` had been made visible (see [`SinkKind::reopen`]).
pub async fn reopen(
    config: &DriverConfig,
    spec: &SinkSpec,
    batch: u64,
) -> Result<bool, DriverError> {
    kind(spec).reopen(config, batch).await
}

/// After a query's runner ended for good (see [`SinkKind::ended`]).
pub async fn ended(spec: &SinkSpec, end: &Ended<'_>) {
    kind(spec).ended(end).await
}

/// An executor's report is checked where it can be: a task reports only
/// what the query's sink writes (a faulty or rogue executor's report of
/// another kind is refused), and then what that kind checks (see
/// [`SinkKind::check_report`]).
pub fn check_reports(
    batch: u64,
    writers: &[pb::TaskOutput],
    sink: &SinkSpec,
) -> Result<(), DriverError> {
    let kind = kind(sink);
    for (task, o) in writers.iter().enumerate() {
        if reported(o).is_some_and(|r| r != kind.reports()) {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported {} files, {} discarded \
                 bytes and Kafka records {}, but the sink {}",
                files_written(o).len(),
                discard::bytes(o),
                if kafka_written(o).is_some() {
                    "written"
                } else {
                    "none"
                },
                kind.describe()
            )));
        }
        kind.check_report(batch, task, o)?;
    }
    Ok(())
}

/// The kind a report holds something of: files, discarded bytes, or a
/// Kafka report (even an empty one). `None`: nothing.
fn reported(o: &pb::TaskOutput) -> Option<Reported> {
    match &o.sink {
        Some(pb::task_output::Sink::Files(f)) if !f.files.is_empty() => Some(Reported::Files),
        Some(pb::task_output::Sink::Discard(d)) if d.bytes > 0 => Some(Reported::Discard),
        Some(pb::task_output::Sink::Kafka(_)) => Some(Reported::Kafka),
        _ => None,
    }
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
