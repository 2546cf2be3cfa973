//! The commit rules, in memory: one fake stands for the checkpoint, the
//! scheduler and the sink at once, and keeps a journal of what each was
//! asked to do, in order.

use std::sync::Mutex;

use sluice_common::checkpoint::{PreparedOutcome, PreparedTransaction, SourceOffsets};

use super::*;
use crate::sink::Written;

/// How the fake's tasks end.
#[derive(Clone, Copy)]
enum Run {
    /// Each task succeeds: the batch read `input_rows` and wrote `rows`.
    Succeed { input_rows: u64, rows: u64 },
    /// A task fails for good.
    Fail,
    /// The query is stopped, or the term ends, while the tasks run.
    CutOff,
}

struct Fake {
    journal: Mutex<Vec<String>>,
    offsets: Mutex<BTreeMap<u64, OffsetRecord>>,
    commits: Mutex<BTreeMap<u64, CommitRecord>>,
    /// What a driver before this one recorded of a prepared batch.
    prepared: Mutex<BTreeMap<u64, TransactionsRecord>>,
    run: Run,
    sink_fails: bool,
    /// Whether a confirmation of the leadership finds another leader.
    deposed: bool,
    /// Whether the query was stopped once its tasks had run.
    stopped: bool,
}

impl Fake {
    fn new(run: Run) -> Self {
        Fake {
            journal: Mutex::default(),
            offsets: Mutex::default(),
            commits: Mutex::default(),
            prepared: Mutex::default(),
            run,
            sink_fails: false,
            deposed: false,
            stopped: false,
        }
    }

    fn note(&self, what: String) {
        self.journal.lock().unwrap().push(what);
    }

    fn journal(&self) -> Vec<String> {
        std::mem::take(&mut self.journal.lock().unwrap())
    }

    /// Plans batch `batch` of the rate source, over values `start..end`.
    fn plan(&self, batch: u64, (start, end): (u64, u64)) -> OffsetRecord {
        let record = plan(batch, (start, end));
        self.offsets.lock().unwrap().insert(batch, record.clone());
        record
    }

    /// Commits batch `batch` as a driver before this one did.
    fn committed(&self, batch: u64, end_value: u64, rows_total: u64) {
        let record = CommitRecord {
            version: RECORD_VERSION,
            batch_id: batch,
            epoch: 1,
            num_rows: 0,
            end_value,
            committed_ms: 0,
            max_event_time_ms: None,
            max_event_times: BTreeMap::new(),
            input_rows_total: Some(rows_total),
        };
        self.commits.lock().unwrap().insert(batch, record);
    }

    fn commit_of(&self, batch: u64) -> Option<CommitRecord> {
        self.commits.lock().unwrap().get(&batch).cloned()
    }
}

fn plan(batch: u64, (start_value, end_value): (u64, u64)) -> OffsetRecord {
    OffsetRecord {
        version: RECORD_VERSION,
        batch_id: batch,
        epoch: 1,
        batch_timestamp_ms: 0,
        watermark_ms: None,
        watermarks: BTreeMap::new(),
        inputs: Inputs::Source(SourceOffsets::Rate {
            start_value,
            end_value,
        }),
        max_rows_per_task: None,
        max_rows_per_batch: None,
        tables: BTreeMap::new(),
    }
}

/// The rate source's check: a plan starts where the committed input ended.
fn gap(committed: Option<&Inputs>, next: &Inputs) -> Option<String> {
    let end = committed.map_or(0, Inputs::end_value);
    (next.start_value() != end).then(|| format!("starts at {}, not {end}", next.start_value()))
}

impl BatchLog for Fake {
    fn latest(&self, log: Log) -> BoxFuture<'_, Result<Option<u64>, DriverError>> {
        let latest = match log {
            Log::Offsets => self.offsets.lock().unwrap().keys().last().copied(),
            Log::Commits => self.commits.lock().unwrap().keys().last().copied(),
            other => panic!("the batch loop does not list {other}"),
        };
        Box::pin(async move { Ok(latest) })
    }

    fn offsets(&self, batch: u64) -> BoxFuture<'_, Result<OffsetRecord, DriverError>> {
        let found = self.offsets.lock().unwrap().get(&batch).cloned();
        Box::pin(async move {
            Ok(found.unwrap_or_else(|| panic!("offsets/{batch} is read but was never written")))
        })
    }

    fn commit(&self, batch: u64) -> BoxFuture<'_, Result<CommitRecord, DriverError>> {
        let found = self.commit_of(batch);
        Box::pin(async move {
            Ok(found.unwrap_or_else(|| panic!("commits/{batch} is read but was never written")))
        })
    }

    /// Create-if-absent, as storage writes a log entry.
    fn write_commit<'a>(
        &'a self,
        record: &'a CommitRecord,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        let mut commits = self.commits.lock().unwrap();
        let ours = !commits.contains_key(&record.batch_id);
        commits
            .entry(record.batch_id)
            .or_insert_with(|| record.clone());
        drop(commits);
        self.note(format!("commits/{}", record.batch_id));
        Box::pin(async move { Ok(ours) })
    }

    fn confirm_leadership(&self) -> BoxFuture<'_, Result<(), DriverError>> {
        self.note("confirm leadership".into());
        let deposed = self.deposed;
        Box::pin(async move {
            match deposed {
                true => Err(DriverError::Deposed { epoch: 9 }),
                false => Ok(()),
            }
        })
    }

    fn shield(&self) -> Result<Shield<'_>, DriverError> {
        match self.stopped {
            true => Err(DriverError::Cancelled),
            false => Ok(Shield::none()),
        }
    }

    fn describe_entry(&self, log: Log, batch: u64) -> String {
        format!("mem://q/{}", log.entry(batch))
    }

    fn describe_dir(&self) -> String {
        "mem://q".into()
    }
}

impl Tasks for Fake {
    fn run<'a>(&'a self, offsets: &'a OffsetRecord) -> BoxFuture<'a, Result<Outcome, DriverError>> {
        self.note(format!("tasks {}", offsets.batch_id));
        let run = self.run;
        Box::pin(async move {
            match run {
                Run::Succeed { input_rows, rows } => Ok(Outcome {
                    input_rows,
                    rows,
                    written: Written {
                        transactions: vec![txn("t-0"), txn("t-1")],
                        ..Written::default()
                    },
                    ..Outcome::default()
                }),
                Run::Fail => Err(DriverError::TaskFailed("partition 1: boom".into())),
                Run::CutOff => Err(DriverError::Cancelled),
            }
        })
    }
}

fn txn(id: &str) -> PreparedTransaction {
    PreparedTransaction {
        transactional_id: id.into(),
        producer_id: 7,
        producer_epoch: 0,
    }
}

impl Committer for Fake {
    fn recorded(
        &self,
        batch: u64,
    ) -> BoxFuture<'_, Result<Option<TransactionsRecord>, DriverError>> {
        let found = self.prepared.lock().unwrap().get(&batch).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn commit<'a>(
        &'a self,
        batch: u64,
        _written: &'a Written,
        prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        let (how, record) = match prepared {
            Prepared::Reported(r) => ("as reported", r),
            Prepared::Recorded(r) => ("as recorded", r),
        };
        let n = record.transactions.len();
        if self.sink_fails {
            self.note(format!("sink commit {batch} failed"));
            let e = DriverError::Internal("the brokers refused".into());
            return Box::pin(async move { Err(e) });
        }
        self.note(format!(
            "sink commit {batch} {how} by epoch {}, {n} transactions",
            record.epoch
        ));
        Box::pin(async move {
            Ok(Committed {
                transactions: Some((n as u64, Duration::ZERO)),
            })
        })
    }
}

fn before(rows: u64, clocks: &Clocks) -> Before<'_> {
    Before {
        epoch: 3,
        rows,
        clocks,
    }
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_batch_commits_after_its_tasks_and_its_sink() {
    let fake = Fake::new(Run::Succeed {
        input_rows: 10,
        rows: 4,
    });
    fake.plan(0, (0, 10));
    fake.committed(0, 10, 10);
    let offsets = fake.plan(1, (10, 20));
    let clocks = Clocks::default();
    let done = run(commit((&fake, &fake, &fake), &offsets, before(10, &clocks))).unwrap();
    assert_eq!(
        fake.journal(),
        [
            "tasks 1",
            "sink commit 1 as reported by epoch 3, 2 transactions",
            "commits/1"
        ]
    );
    let record = fake.commit_of(1).unwrap();
    assert_eq!(record, done.record);
    assert_eq!(
        (
            record.epoch,
            record.num_rows,
            record.end_value,
            record.input_rows_total
        ),
        (3, 4, 20, Some(20))
    );
    assert_eq!(done.committed.transactions.map(|(n, _)| n), Some(2));
}

#[test]
fn a_batch_a_driver_before_prepared_runs_no_task_again() {
    let fake = Fake::new(Run::Fail);
    let offsets = fake.plan(0, (0, 10));
    let outcome = PreparedOutcome {
        input_rows: 10,
        rows: 6,
        ..PreparedOutcome::default()
    };
    let recorded = TransactionsRecord {
        version: RECORD_VERSION,
        batch_id: 0,
        epoch: 2,
        transactions: vec![txn("t-0"), txn("t-1"), txn("t-2")],
        outcome,
    };
    fake.prepared.lock().unwrap().insert(0, recorded);
    let clocks = Clocks::default();
    let done = run(commit((&fake, &fake, &fake), &offsets, before(0, &clocks))).unwrap();
    assert_eq!(
        fake.journal(),
        [
            "sink commit 0 as recorded by epoch 2, 3 transactions",
            "commits/0"
        ],
        "the tasks that prepared the batch are not run again"
    );
    let record = fake.commit_of(0).unwrap();
    assert_eq!(
        (record.epoch, record.num_rows, record.input_rows_total),
        (3, 6, Some(10))
    );
    assert_eq!(done.outcome.rows, 6);
}

#[test]
fn a_batch_that_fails_or_is_cut_off_is_abandoned_and_replayed_as_planned() {
    for (how, expect_stop) in [(Run::Fail, false), (Run::CutOff, true)] {
        let fake = Fake::new(how);
        fake.plan(0, (0, 10));
        fake.committed(0, 10, 10);
        let offsets = fake.plan(1, (10, 25));
        let clocks = Clocks::default();
        let e = run(commit((&fake, &fake, &fake), &offsets, before(10, &clocks))).unwrap_err();
        assert_eq!(matches!(e, DriverError::Cancelled), expect_stop, "{e}");
        assert_eq!(fake.journal(), ["tasks 1"], "no sink commit, no commits/1");
        assert_eq!(fake.commit_of(1), None);

        let resumed = run(resume(&fake, gap)).unwrap();
        assert_eq!(resumed.next, 1);
        assert_eq!(
            resumed.replay,
            Some(offsets),
            "replayed from offsets/1 as planned"
        );
        assert_eq!(resumed.committed, Some(plan(0, (0, 10)).inputs));
        assert_eq!(resumed.rows, 10);
    }
}

#[test]
fn a_batch_stopped_before_its_sink_commit_begins_commits_nothing() {
    let mut fake = Fake::new(Run::Succeed {
        input_rows: 10,
        rows: 10,
    });
    fake.stopped = true;
    let offsets = fake.plan(0, (0, 10));
    let clocks = Clocks::default();
    let e = run(commit((&fake, &fake, &fake), &offsets, before(0, &clocks))).unwrap_err();
    assert!(matches!(e, DriverError::Cancelled), "{e}");
    assert_eq!(fake.journal(), ["tasks 0"], "no sink commit, no commits/0");
    assert_eq!(run(resume(&fake, gap)).unwrap().replay, Some(offsets));
}

#[test]
fn a_sink_commit_that_fails_writes_no_commit() {
    let mut fake = Fake::new(Run::Succeed {
        input_rows: 10,
        rows: 10,
    });
    fake.sink_fails = true;
    let offsets = fake.plan(0, (0, 10));
    let clocks = Clocks::default();
    let e = run(commit((&fake, &fake, &fake), &offsets, before(0, &clocks))).unwrap_err();
    assert!(e.to_string().contains("the brokers refused"), "{e}");
    assert_eq!(fake.journal(), ["tasks 0", "sink commit 0 failed"]);
    assert_eq!(fake.commit_of(0), None);
    assert_eq!(run(resume(&fake, gap)).unwrap().replay, Some(offsets));
}

#[test]
fn a_commit_another_driver_wrote_is_adopted_only_while_this_one_leads() {
    for deposed in [false, true] {
        let mut fake = Fake::new(Run::Succeed {
            input_rows: 10,
            rows: 10,
        });
        fake.deposed = deposed;
        let offsets = fake.plan(0, (0, 10));
        fake.committed(0, 10, 10);
        let clocks = Clocks::default();
        let done = run(commit((&fake, &fake, &fake), &offsets, before(0, &clocks)));
        assert_eq!(
            fake.journal(),
            [
                "tasks 0",
                "sink commit 0 as reported by epoch 3, 2 transactions",
                "commits/0",
                "confirm leadership"
            ]
        );
        assert_eq!(
            fake.commit_of(0).unwrap().epoch,
            1,
            "the record there stays"
        );
        match done {
            Ok(_) => assert!(!deposed),
            Err(e) => assert!(deposed && matches!(e, DriverError::Deposed { .. }), "{e}"),
        }
    }
}

#[test]
fn a_query_resumes_after_its_last_commit() {
    let fake = Fake::new(Run::Fail);
    let fresh = run(resume(&fake, gap)).unwrap();
    assert_eq!(
        (fresh.next, fresh.committed, fresh.replay, fresh.rows),
        (0, None, None, 0)
    );

    fake.plan(0, (0, 10));
    let first = run(resume(&fake, gap)).unwrap();
    assert_eq!((first.next, first.replay), (0, Some(plan(0, (0, 10)))));

    fake.committed(0, 10, 10);
    fake.plan(1, (10, 30));
    fake.committed(1, 30, 30);
    let next = run(resume(&fake, gap)).unwrap();
    assert_eq!((next.next, next.replay, next.rows), (2, None, 30));
    assert_eq!(next.committed, Some(plan(1, (10, 30)).inputs));
}

#[test]
fn a_checkpoint_no_crash_can_leave_is_refused_by_name() {
    // A replay that does not start where the last commit ended.
    let fake = Fake::new(Run::Fail);
    fake.plan(0, (0, 10));
    fake.committed(0, 10, 10);
    fake.plan(1, (12, 20));
    let e = run(resume(&fake, gap)).unwrap_err().to_string();
    assert!(
        e.contains("mem://q/offsets/") && e.contains("starts at 12, not 10"),
        "{e}"
    );

    // A commit that disagrees with its plan.
    let fake = Fake::new(Run::Fail);
    fake.plan(0, (0, 10));
    fake.committed(0, 11, 11);
    let e = run(resume(&fake, gap)).unwrap_err().to_string();
    assert!(
        e.contains("ending at 10") && e.contains("ending at 11"),
        "{e}"
    );

    // A plan recorded under another batch's name.
    let fake = Fake::new(Run::Fail);
    fake.offsets.lock().unwrap().insert(0, plan(3, (0, 10)));
    let e = run(resume(&fake, gap)).unwrap_err().to_string();
    assert!(e.contains("records batch 3"), "{e}");

    // A commit without the plan it commits.
    let fake = Fake::new(Run::Fail);
    fake.committed(0, 10, 10);
    let e = run(resume(&fake, gap)).unwrap_err();
    assert!(
        matches!(&e, DriverError::Common(CommonError::Corrupt { path, .. }) if path == "mem://q"),
        "{e}"
    );
}
