//! Map and reduce tasks over several batches: the output is the running
//! aggregate, and a state reloaded from storage gives the same bytes as
//! the state held in memory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sluice_common::checkpoint::STATE_DIR;
use sluice_proto::task_result::Outcome;
use sluice_proto::{
    AggregateWork, OperatorSide, OperatorSides, RateTask, ShuffleMapWork, ShuffleRange, SinkFormat,
    StateWork, TaskAssignment, TaskOutput, TaskSink, TaskSource, shuffle_map_work,
    task_assignment::Work, task_source,
};
use tokio::sync::Semaphore;

use crate::cache::Caches;
use crate::sink::files::files_of;
use crate::task::execute;

const SQL: &str =
    "SELECT value % 10 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 10";
const BUCKETS: u32 = 2;

fn base(sink_dir: &str, batch: u64, partition: u32) -> TaskAssignment {
    TaskAssignment {
        task_id: format!("t{batch}/{partition}"),
        query_id: "q".into(),
        query_name: "counts".into(),
        batch_id: batch,
        partition,
        epoch: 1,
        sink: Some(TaskSink {
            kind: Some(sluice_proto::task_sink::Kind::Files(
                sluice_proto::FilesTaskSink {
                    path: sink_dir.into(),
                    format: SinkFormat::Jsonl.into(),
                    ..Default::default()
                },
            )),
        }),
        plan: Some(sluice_proto::TaskPlan {
            sql: SQL.into(),
            streams: vec![sluice_proto::StreamPlan {
                name: "input".into(),
                schema: sluice_sql::encode_schema(&sluice_common::rate::schema()),
            }],
            tables: Vec::new(),
            plan_budget_ms: 0,
            max_output_bytes: 0,
        }),
        ..Default::default()
    }
}

async fn run(task: TaskAssignment, caches: &Arc<Caches>) -> TaskOutput {
    let slot = Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap();
    let r = execute(task, slot, caches.clone()).await;
    match r.outcome {
        Some(Outcome::Ok(out)) => out,
        other => panic!("task failed: {other:?}"),
    }
}

/// One batch over values [start, end): two map tasks, then a reduce task
/// per bucket. Returns the reduce tasks' outputs.
async fn batch(
    ckpt: &str,
    sink_dir: &str,
    n: u64,
    (start, end): (u64, u64),
    mode: &str,
    caches: &Arc<Caches>,
) -> Vec<TaskOutput> {
    let mut ranges: Vec<Vec<ShuffleRange>> = vec![Vec::new(); BUCKETS as usize];
    for p in 0..2 {
        let mut t = base(sink_dir, n, p);
        t.source = Some(TaskSource {
            kind: Some(task_source::Kind::Rate(RateTask {
                partitions: 2,
                rows_per_second: 100,
                start_ms: 0,
                start_value: start,
                end_value: end,
                partition_count: 1,
                first_partition: p,
            })),
            table: String::new(),
        });
        t.work = Some(Work::ShuffleMap(ShuffleMapWork {
            checkpoint: ckpt.into(),
            buckets: BUCKETS,
            rows: Some(shuffle_map_work::Rows::Sides(OperatorSides {
                sides: vec![OperatorSide {
                    operator: 0,
                    side: 0,
                }],
            })),
        }));
        let out = run(t, caches).await;
        assert_eq!(out.input_rows, (end - start) / 2);
        assert!(
            files_of(&out).is_empty(),
            "a map task of a stateful query writes no sink file"
        );
        assert_eq!(out.shuffle.len(), BUCKETS as usize, "one range per bucket");
        for (b, r) in out.shuffle.into_iter().enumerate() {
            ranges[b].push(r);
        }
    }
    let mut outs = Vec::new();
    for (b, inputs) in ranges.into_iter().enumerate() {
        let mut t = base(sink_dir, n, b as u32);
        t.work = Some(Work::Aggregate(AggregateWork {
            state: Some(StateWork {
                checkpoint: ckpt.into(),
                inputs,
                operator: "aggregate".into(),
                read_version: n.checked_sub(1),
                snapshot_interval: 2,
                index: 0,
                next_buckets: 0,
                ..Default::default()
            }),
            output_mode: sluice_common::spec::OutputMode::parse(mode)
                .expect("a test's mode")
                .to_proto()
                .into(),
            changes: sluice_proto::Changes::None.into(),
        }));
        outs.push(run(t, caches).await);
    }
    outs
}

/// k -> (n, s) of every jsonl row the tasks wrote, the last row winning.
fn latest(sink_dir: &Path, outs: &[TaskOutput], into: &mut BTreeMap<i64, (i64, i64)>) {
    for f in outs.iter().flat_map(files_of) {
        let text = std::fs::read_to_string(sink_dir.join(&f.path)).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let get = |c: &str| v[c].as_i64().unwrap();
            into.insert(get("k"), (get("n"), get("s")));
        }
    }
}

fn expected(end: i64) -> BTreeMap<i64, (i64, i64)> {
    let mut want = BTreeMap::new();
    for v in 0..end {
        let e = want.entry(v % 10).or_insert((0, 0));
        e.0 += 1;
        e.1 += v;
    }
    want
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

const BATCHES: [(u64, u64); 4] = [(0, 100), (100, 160), (160, 160), (160, 300)];

#[tokio::test]
async fn update_mode_emits_the_changed_groups_with_their_running_values() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, out) = (dir.path().join("ckpt"), dir.path().join("out"));
    let (ckpt_s, out_s) = (ckpt.to_str().unwrap(), out.to_str().unwrap());
    let caches = Arc::new(Caches::default());
    let mut seen = BTreeMap::new();
    for (n, range) in BATCHES.iter().enumerate() {
        let outs = batch(ckpt_s, out_s, n as u64, *range, "update", &caches).await;
        let mut this = BTreeMap::new();
        latest(&out, &outs, &mut this);
        if range.0 == range.1 {
            assert!(this.is_empty(), "an empty batch changes no group");
        }
        seen.extend(this);
        assert_eq!(seen, expected(range.1 as i64), "after batch {n}");
        let state_rows: u64 = outs.iter().map(|o| o.state_rows).sum();
        assert_eq!(state_rows, 10);
        assert!(outs.iter().all(|o| o.state_bytes > 0));
    }
    // Version 1 was due a snapshot, written in the background while
    // batch 2 ran.
    caches.background.close();
    caches.background.wait().await;
    let snapshots = files(&ckpt.join(STATE_DIR))
        .into_keys()
        .filter(|k| k.ends_with(".snapshot"))
        .count();
    assert_eq!(snapshots, BUCKETS as usize);
}

#[tokio::test]
async fn a_reloaded_state_writes_what_the_held_state_writes() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let ckpt_s = ckpt.to_str().unwrap();
    let (held, reloaded) = (dir.path().join("held"), dir.path().join("reloaded"));
    let caches = Arc::new(Caches::default());
    let mut last = BTreeMap::new();
    for (n, range) in BATCHES.iter().enumerate() {
        let a = batch(
            ckpt_s,
            held.to_str().unwrap(),
            n as u64,
            *range,
            "complete",
            &caches,
        )
        .await;
        // A fresh executor for every batch: each reduce task rebuilds its
        // state from the snapshot and deltas the first pipeline wrote, and
        // writes (adopts) the same shuffle files and deltas.
        let fresh = Arc::new(Caches::default());
        let b = batch(
            ckpt_s,
            reloaded.to_str().unwrap(),
            n as u64,
            *range,
            "complete",
            &fresh,
        )
        .await;
        assert_eq!(
            a.iter().map(|o| o.state_rows).collect::<Vec<_>>(),
            b.iter().map(|o| o.state_rows).collect::<Vec<_>>()
        );
        last.clear();
        latest(&held, &a, &mut last);
        assert_eq!(
            last,
            expected(range.1 as i64),
            "complete output after batch {n}"
        );
    }
    assert_eq!(files(&held), files(&reloaded));
}
