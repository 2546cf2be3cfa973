//! A query's state operators planned from its spec, and one operator's
//! state read back from the files its reduce tasks write.

use arrow_array::cast::AsArray;
use arrow_array::{Int64Array, RecordBatch};
use sluice_common::checkpoint::{Checkpoint, query_location};
use sluice_common::state::{StateFile, StateStore};
use sluice_common::storage::Stores;

use super::*;
use crate::state::codec;
use crate::state::table::Change;
use sluice_plan::DEDUP;

const COUNTS: &str =
    "SELECT value % 10 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 10";

fn spec(extra: &str) -> QuerySpec {
    let yaml = format!(
        "name: q\nsource:\n  rate:\n    partitions: 1\n    rows_per_second: 10\n\
         sink:\n  files:\n    path: /tmp/out\n{extra}"
    );
    QuerySpec::parse(&yaml).unwrap()
}

async fn operators_of(spec: &QuerySpec) -> Vec<StateOperator> {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
    let inputs = inputs(&cp.query("q"), spec).await.unwrap();
    operators(spec, &inputs).await.unwrap()
}

fn names(schema: &SchemaRef) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

#[tokio::test]
async fn an_aggregation_is_one_operator_keyed_by_its_group() {
    let spec = spec(&format!("sql: \"{COUNTS}\"\n"));
    let ops = operators_of(&spec).await;
    let streams = vec![("input".to_string(), sluice_common::rate::schema())];
    let checked = sluice_sql::check(COUNTS, &streams, &[], sluice_sql::guard::DEFAULT_BUDGET)
        .await
        .unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].name, checked.ops[0].name, "the driver's name");
    assert_eq!(ops[0].keys, 1);
    assert_eq!(
        ops[0].schema.fields().len(),
        3,
        "{:?}",
        names(&ops[0].schema)
    );
}

/// The state's columns read by the query's names of its keys and
/// aggregates, as its sink names them; the engine's where the query
/// gives none.
#[tokio::test]
async fn an_aggregations_state_is_named_as_the_query_names_it() {
    let view = |sql: &str| {
        let spec = spec(&format!("sql: \"{sql}\"\n"));
        async move { names(&operators_of(&spec).await[0].view) }
    };
    assert_eq!(view(COUNTS).await, ["k", "n", "s"]);
    assert_eq!(
        view(
            "SELECT count(*) AS n, value % 5 AS k FROM input GROUP BY value % 5 HAVING count(*) > 1"
        )
        .await,
        ["k", "n"]
    );
    assert_eq!(
        view(
            "SELECT value % 5 AS k, avg(value) AS a, min(value) AS lo FROM input GROUP BY value % 5"
        )
        .await,
        ["k", "a[count]", "a[sum]", "lo"]
    );
    // A key the SELECT leaves out, an aggregate inside an expression.
    assert_eq!(
        view("SELECT count(*) * 2 AS twice FROM input GROUP BY value % 5").await,
        ["input.value % Int64(5)", "count(Int64(1))[count]"]
    );
    assert_eq!(
        view(
            "SELECT window(timestamp_ms, '10 seconds', '5 seconds') AS w, count(*) AS n FROM input \
              GROUP BY window(timestamp_ms, '10 seconds', '5 seconds')"
        )
        .await,
        ["w", "n"]
    );
}

#[tokio::test]
async fn an_aggregation_of_changes_keeps_its_input_rows_counted() {
    let sql = "SELECT n, count(*) AS c FROM (SELECT value % 10 AS k, count(*) AS n FROM input GROUP BY value % 10) GROUP BY n";
    let ops = operators_of(&spec(&format!("sql: \"{sql}\"\n"))).await;
    assert_eq!(ops.len(), 2);
    assert_ne!(ops[0].name, ops[1].name);
    let last = &ops[1];
    assert_eq!(last.keys, last.schema.fields().len() - 1, "{last:?}");
}

#[tokio::test]
async fn dedup_keeps_its_key_and_expiry() {
    let extra = "sql: SELECT value, timestamp_ms FROM input\n\
                 watermark: {column: timestamp_ms, delay_ms: 0}\n\
                 dedup: {columns: [value], within_ms: 1000}\n";
    let ops = operators_of(&spec(extra)).await;
    assert_eq!(ops.len(), 1);
    assert_eq!((ops[0].name.as_str(), ops[0].keys), (DEDUP, 1));
    assert_eq!(names(&ops[0].schema)[0], "value");
}

#[tokio::test]
async fn a_stateless_query_has_no_operator() {
    let ops = operators_of(&spec("sql: SELECT value FROM input WHERE value > 3\n")).await;
    assert!(ops.is_empty());
}

#[tokio::test]
async fn the_state_of_a_version_is_every_partitions_rows() {
    let spec = spec(&format!("sql: \"{COUNTS}\"\n"));
    let op = operators_of(&spec).await.remove(0);
    let dir = tempfile::tempdir().unwrap();
    let location = query_location(&dir.path().display().to_string(), "q");
    let store = StateStore::open(&Stores::default(), &location).unwrap();
    let two = Lineage {
        partitions: 2,
        rescales: Vec::new(),
    };
    let err = read(&store, &op, 0, &two).await.unwrap_err().to_string();
    assert!(err.contains("is missing"), "{err}");

    // Two partitions, each with one delta: keys 0..3 and 3..5.
    for (p, keys) in [(0u32, 0..3i64), (1, 3..5)] {
        write_first_delta(&store, &op, p, keys, |k| k + 1, None).await;
    }
    let rows = read(&store, &op, 0, &two).await.unwrap();
    let total: usize = rows.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(total, 5);
    let err = read(&store, &op, 1, &two).await.unwrap_err().to_string();
    assert!(err.contains("cannot be rebuilt"), "{err}");

    // Rescaled to 3 partitions after version 0: the rows are the same,
    // each in the partition the shuffle routes its key to, and each new
    // partition's start is written as a snapshot of generation 1.
    let three = Lineage {
        partitions: 3,
        rescales: vec![sluice_proto::StateRescale {
            generation: 1,
            state_version: Some(0),
            previous_partitions: 2,
            partitions: 3,
        }],
    };
    let rows = read(&store, &op, 0, &three).await.unwrap();
    let mut keys = Vec::new();
    for (p, part) in rows.iter().enumerate() {
        let column = part
            .column(0)
            .as_primitive::<arrow_array::types::Int64Type>();
        for k in column.values() {
            let routed =
                crate::shuffle::buckets_of(&[part.column(0).clone()], part.num_rows(), 3).unwrap();
            assert!(
                routed.iter().all(|&b| b as usize == p),
                "key {k} in partition {p}"
            );
            keys.push(*k);
        }
    }
    keys.sort();
    assert_eq!(keys, vec![0, 1, 2, 3, 4]);
    let rescaled = store.in_generation(1);
    for p in 0..3 {
        let files = rescaled.files(&op.name, p).await.unwrap();
        assert_eq!(files, vec![StateFile::Snapshot(0)], "partition {p}");
    }
}

#[tokio::test]
async fn restarts_without_a_batch_between_are_rebuilt_from_the_generation_that_committed() {
    let spec = spec(&format!("sql: \"{COUNTS}\"\n"));
    let op = operators_of(&spec).await.remove(0);
    let dir = tempfile::tempdir().unwrap();
    let location = query_location(&dir.path().display().to_string(), "q");
    let store = StateStore::open(&Stores::default(), &location).unwrap();
    for (p, keys) in [(0u32, 0..3i64), (1, 3..5)] {
        write_first_delta(&store, &op, p, keys, |k| k + 1, None).await;
    }
    // 2 → 1 → 16 → 3, each restart after version 0.
    let chain = [2, 1, 16, 3];
    let rescales = chain
        .windows(2)
        .zip(1..)
        .map(|(w, generation)| sluice_proto::StateRescale {
            generation,
            state_version: Some(0),
            previous_partitions: w[0],
            partitions: w[1],
        })
        .collect();
    let three = Lineage {
        partitions: 3,
        rescales,
    };
    let rows = read(&store, &op, 0, &three).await.unwrap();
    let mut keys: Vec<i64> = rows
        .iter()
        .flat_map(|p| {
            let k = p.column(0).as_primitive::<arrow_array::types::Int64Type>();
            k.values().to_vec()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, vec![0, 1, 2, 3, 4]);
    for g in 1..=2 {
        let passed = store.in_generation(g).partitions(&op.name).await.unwrap();
        assert!(
            passed.is_empty(),
            "generation {g} has partitions {passed:?}"
        );
    }
    let last = store.in_generation(3);
    for p in 0..3 {
        let files = last.files(&op.name, p).await.unwrap();
        assert_eq!(files, vec![StateFile::Snapshot(0)], "partition {p}");
    }
}

/// With `state_ttl_ms`, an aggregation without a window keeps its rows
/// stamped (a windowed one does not); its state reads back as the
/// operator's rows, and a rescale moves each row with its stamp.
#[tokio::test]
async fn a_ttl_stamps_an_aggregation_and_a_rescale_keeps_its_stamps() {
    let ttl = "state_ttl_ms: 1000\n";
    let op = operators_of(&spec(&format!("sql: \"{COUNTS}\"\n{ttl}")))
        .await
        .remove(0);
    assert!(op.stamped, "{op:?}");
    let windowed = "sql: \"SELECT window(timestamp_ms, '1 second') AS w, count(*) AS n FROM input GROUP BY window(timestamp_ms, '1 second')\"\n";
    let ops = operators_of(&spec(&format!("{windowed}{ttl}"))).await;
    assert!(!ops[0].stamped, "{ops:?}");

    let dir = tempfile::tempdir().unwrap();
    let location = query_location(&dir.path().display().to_string(), "q");
    let store = StateStore::open(&Stores::default(), &location).unwrap();
    let states = States::default();
    let stored = states.table(op.schema.clone(), op.keys, true).unwrap();
    let stored = stored.stored_schema().clone();
    for (p, keys) in [(0u32, 0..3i64), (1, 3..5)] {
        write_first_delta(&store, &op, p, keys, |_| 1, Some(100 + i64::from(p))).await;
    }
    let three = Lineage {
        partitions: 3,
        rescales: vec![sluice_proto::StateRescale {
            generation: 1,
            state_version: Some(0),
            previous_partitions: 2,
            partitions: 3,
        }],
    };
    let rows = read(&store, &op, 0, &three).await.unwrap();
    assert!(rows.iter().all(|r| r.schema() == op.view), "no stamp");
    assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 5);
    let mut stamps = Vec::new();
    for p in 0..3 {
        let file = StateFile::Snapshot(0);
        let bytes = store
            .in_generation(1)
            .read(&op.name, p, file)
            .await
            .unwrap();
        for b in codec::decode(bytes, &stored, "snapshot").unwrap() {
            let column = |i: usize| b.column(i).as_primitive::<arrow_array::types::Int64Type>();
            let (k, at) = (column(0), column(b.num_columns() - 1));
            stamps.extend(k.values().iter().copied().zip(at.values().iter().copied()));
        }
    }
    stamps.sort();
    assert_eq!(stamps, [(0, 100), (1, 100), (2, 100), (3, 101), (4, 101)]);
}

/// Writes `op`'s delta of batch 0 in partition `p`: a row per key of
/// `keys`, whose count is `count(key)`, stamped `stamp` in a table with
/// stamps (`None`: without).
async fn write_first_delta(
    store: &StateStore,
    op: &StateOperator,
    p: u32,
    keys: std::ops::Range<i64>,
    count: impl Fn(i64) -> i64,
    stamp: Option<i64>,
) {
    let states = States::default();
    let mut table = states
        .table(op.schema.clone(), op.keys, stamp.is_some())
        .unwrap();
    if let Some(now) = stamp {
        table.set_now(now);
    }
    let n = keys.clone().count();
    let upserts = RecordBatch::try_new(
        op.schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(keys.clone())),
            Arc::new(Int64Array::from_iter_values(keys.map(count))),
            Arc::new(Int64Array::from(vec![7; n])),
        ],
    )
    .unwrap();
    let change = Change {
        deletes: RecordBatch::new_empty(op.schema.clone()),
        upserts,
    };
    table.apply(&change, 0).unwrap();
    let delta = codec::encode(&table.delta_schema(), &[table.to_delta(&change).unwrap()]);
    store
        .write(&op.name, p, StateFile::Delta(0), delta.unwrap())
        .await
        .unwrap();
}
