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

mod compactions;
pub mod delta;
pub mod discard;
pub mod files;
pub mod iceberg;
mod io;
pub mod kafka;

use std::time::Duration;

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use sluice_common::checkpoint::{PreparedTransaction, QueryCheckpoint, TransactionsRecord};
use sluice_common::sink::SinkFile;
use sluice_common::spec::{OutputMode, QuerySpec, SinkSpec};
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

    /// Adds a task's report to what the batch wrote, if the report is of
    /// this kind; `false` for another kind's report.
    fn written(&self, report: &pb::task_output::Sink, into: &mut Written) -> bool;

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

    /// At submit, once the SQL is checked: its output columns, emitted in
    /// `mode`, suit the sink.
    fn check_output(&self, _output: &SchemaRef, _mode: OutputMode) -> Result<(), DriverError> {
        Ok(())
    }

    /// At submit, after [`SinkKind::check_output`]: what the sink holds
    /// already (a table's schema) takes the output.
    fn check_table<'a>(
        &'a self,
        _config: &'a DriverConfig,
        _output: &'a SchemaRef,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async { Ok(()) })
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
        _qc: &'a QueryCheckpoint,
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
    /// What each task is told of the sink, from what the spec tells it
    /// (`spec`): a sink that reads its place or columns from what it
    /// opened adds them here, once, before the first task.
    fn task_sink(&self, spec: pb::TaskSink) -> pb::TaskSink {
        spec
    }

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
    /// of N does the same again and adopts what is there. `written` is
    /// what its tasks reported (nothing of a batch a driver before this
    /// one prepared: `prepared` holds its record).
    fn commit<'a>(
        &'a self,
        batch: u64,
        written: &'a Written,
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

/// What a batch's writing tasks wrote, as their reports say, checked and
/// summed by the query's sink kind (see [`written`]).
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// The bytes written (or, for the discard sink, counted).
    pub bytes: u64,
    /// A file sink's files, in the manifest's form.
    pub files: Vec<SinkFile>,
    /// An exactly-once Kafka sink's transactions, left open by its tasks.
    pub transactions: Vec<PreparedTransaction>,
    /// The longest any of those transactions had been open when its task
    /// reported.
    pub longest_open_ms: u64,
}

/// The registry of sink kinds: the one place that matches on a sink's
/// spec.
fn kind(spec: &SinkSpec) -> Box<dyn SinkKind + '_> {
    match spec {
        SinkSpec::Files(s) => Box::new(files::Kind(s)),
        SinkSpec::Discard(_) => Box::new(discard::Kind),
        SinkSpec::Kafka(s) => Box::new(kafka::Kind(s)),
        SinkSpec::Delta(s) => Box::new(delta::Kind(s)),
        SinkSpec::Iceberg(s) => Box::new(iceberg::Kind(s)),
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

/// At submit, once the SQL is checked: the output columns, emitted in
/// `mode`, suit the sink.
pub fn check_output(
    spec: &QuerySpec,
    output: &SchemaRef,
    mode: OutputMode,
) -> Result<(), DriverError> {
    kind(&spec.sink).check_output(output, mode)
}

/// At submit, once the output is checked: what the sink holds takes it
/// (see [`SinkKind::check_table`]).
pub async fn check_table(
    config: &DriverConfig,
    spec: &QuerySpec,
    output: &SchemaRef,
) -> Result<(), DriverError> {
    kind(&spec.sink).check_table(config, output).await
}

/// Opens the sink of a running query.
pub async fn open(io: &SinkIo, spec: &SinkSpec) -> Result<Box<dyn Committer>, DriverError> {
    kind(spec).open(io).await
}

/// At the restart of a stopped query: whether its uncommitted batch
/// `batch` had been made visible (see [`SinkKind::reopen`]).
pub async fn reopen(
    config: &DriverConfig,
    qc: &QueryCheckpoint,
    spec: &SinkSpec,
    batch: u64,
) -> Result<bool, DriverError> {
    kind(spec).reopen(config, qc, batch).await
}

/// After a query's runner ended for good (see [`SinkKind::ended`]).
pub async fn ended(spec: &SinkSpec, end: &Ended<'_>) {
    kind(spec).ended(end).await
}

/// Checks and sums the reports of a batch's writing tasks. An executor's
/// report is checked where it can be: a task reports only what the
/// query's sink writes (a faulty or rogue executor's report of another
/// kind is refused), and then what that kind checks (see
/// [`SinkKind::check_report`]).
pub fn written(
    batch: u64,
    writers: &[pb::TaskOutput],
    sink: &SinkSpec,
) -> Result<Written, DriverError> {
    let kind = kind(sink);
    let mut written = Written::default();
    for (task, o) in writers.iter().enumerate() {
        if let Some(report) = &o.sink
            && !kind.written(report, &mut written)
        {
            return Err(DriverError::TaskFailed(format!(
                "batch {batch}, task {task}: the executor reported what another kind of sink \
                 writes, but the sink {}",
                kind.describe()
            )));
        }
        kind.check_report(batch, task, o)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_common::spec::QuerySpec;

    fn sink(yaml: &str) -> SinkSpec {
        let text = format!(
            "name: q\nsource: {{rate: {{rows_per_second: 10, partitions: 1}}}}\nsink: {yaml}\n"
        );
        QuerySpec::parse(&text).expect("spec").sink
    }

    fn report(rows: u64, sink: pb::task_output::Sink) -> pb::TaskOutput {
        pb::TaskOutput {
            rows,
            sink: Some(sink),
            ..Default::default()
        }
    }

    fn files(rows: &[u64]) -> pb::task_output::Sink {
        let files = rows
            .iter()
            .enumerate()
            .map(|(i, &rows)| pb::SinkFile {
                path: format!("part-{i}"),
                rows,
                bytes: 10 * rows,
            })
            .collect();
        pb::task_output::Sink::Files(pb::FilesWritten { files })
    }

    fn kafka(transaction: bool, open_ms: u64) -> pb::task_output::Sink {
        pb::task_output::Sink::Kafka(pb::KafkaWritten {
            bytes: 5,
            open_ms,
            transaction: transaction.then(|| pb::PreparedTransaction {
                transactional_id: "sluice-q-0".into(),
                producer_id: 7,
                producer_epoch: 1,
            }),
        })
    }

    #[test]
    fn each_kind_sums_its_own_reports() {
        let got = written(
            3,
            &[report(3, files(&[1, 2])), report(4, files(&[4]))],
            &sink("{files: {path: /tmp/out}}"),
        )
        .expect("files");
        assert_eq!((got.files.len(), got.bytes), (3, 70));
        let discard = pb::task_output::Sink::Discard(pb::DiscardWritten { bytes: 9 });
        let got = written(3, &[report(2, discard)], &sink("{discard: {}}")).expect("discard");
        assert_eq!((got.bytes, got.files.len()), (9, 0));
        let exactly_once = sink("{kafka: {bootstrap_servers: 'b:9092', topic: t}}");
        let reports = [report(2, kafka(true, 30)), report(1, kafka(true, 80))];
        let got = written(3, &reports, &exactly_once).expect("kafka");
        assert_eq!((got.bytes, got.transactions.len()), (10, 2));
        assert_eq!(got.longest_open_ms, 80);
        // A task that wrote nothing reports nothing, whatever the sink.
        let nothing = pb::TaskOutput::default();
        written(3, std::slice::from_ref(&nothing), &exactly_once).expect("empty");
    }

    #[test]
    fn a_report_the_sink_cannot_have_made_is_refused() {
        let refused = |reports: &[pb::TaskOutput], spec: &str| {
            let e = written(4, reports, &sink(spec)).expect_err("refused");
            assert!(matches!(e, DriverError::TaskFailed(_)), "{e:?}");
            e.to_string()
        };
        // Another kind's report.
        let m = refused(&[report(1, kafka(false, 0))], "{discard: {}}");
        assert!(
            m.contains("batch 4, task 0") && m.contains("is discard"),
            "{m}"
        );
        let m = refused(
            &[report(1, files(&[1]))],
            "{kafka: {bootstrap_servers: 'b:9092', topic: t}}",
        );
        assert!(m.contains("is Kafka"), "{m}");
        // Rows that no listed file holds.
        let m = refused(
            &[report(1, files(&[1])), report(5, files(&[2]))],
            "{files: {path: /tmp/out}}",
        );
        assert!(
            m.contains("task 1") && m.contains("5 rows written") && m.contains("hold 2"),
            "{m}"
        );
        // Exactly-once records without their transaction.
        let m = refused(
            &[report(3, kafka(false, 0))],
            "{kafka: {bootstrap_servers: 'b:9092', topic: t}}",
        );
        assert!(m.contains("without the transaction"), "{m}");
        // At least once: no transaction is expected.
        let at_least_once =
            "{kafka: {bootstrap_servers: 'b:9092', topic: t, delivery: at_least_once}}";
        written(4, &[report(3, kafka(false, 0))], &sink(at_least_once)).expect("at least once");
    }
}
