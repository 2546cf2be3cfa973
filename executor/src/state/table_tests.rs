use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::*;
use crate::state::{test_stamped, test_table, test_table_in_memory};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]))
}

fn table() -> StateTable {
    test_table(schema(), 1)
}

fn rows(pairs: &[(&str, i64)]) -> RecordBatch {
    let k: StringArray = pairs.iter().map(|(k, _)| Some(*k)).collect();
    let n: Int64Array = pairs.iter().map(|(_, n)| Some(*n)).collect();
    RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(n)]).unwrap()
}

fn pairs(b: &RecordBatch) -> Vec<(String, i64)> {
    let k = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
    let n = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
    (0..b.num_rows())
        .map(|i| (k.value(i).to_string(), n.value(i)))
        .collect()
}

fn owned(p: &[(&str, i64)]) -> Vec<(String, i64)> {
    p.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

fn change(upserts: &[(&str, i64)], deletes: &[(&str, i64)]) -> Change {
    Change {
        upserts: rows(upserts),
        deletes: rows(deletes),
    }
}

#[test]
fn a_change_replaces_adds_and_removes_keys_and_the_state_is_in_key_order() {
    let mut t = table();
    t.apply(&change(&[("c", 3), ("a", 1), ("b", 2)], &[]), 0)
        .unwrap();
    t.apply(&change(&[("b", 20), ("d", 4)], &[("a", 1)]), 1)
        .unwrap();
    assert_eq!(
        pairs(&t.scan().unwrap()),
        owned(&[("b", 20), ("c", 3), ("d", 4)])
    );
    assert_eq!((t.len(), t.version), (3, Some(1)));

    let (found, new) = t
        .lookup(&[rows(&[("d", 9), ("x", 1), ("d", 1), ("c", 1)])])
        .unwrap();
    assert_eq!(pairs(&found), owned(&[("d", 4), ("c", 3)]));
    assert_eq!(new, 1);
    let probe = rows(&[("x", 0), ("b", 0), ("x", 0), ("e", 0)]);
    let is_new: Vec<bool> = t.is_new(&probe).unwrap().iter().flatten().collect();
    assert_eq!(is_new, [true, false, true, true]);
    let first: Vec<bool> = t.first_new(&probe).unwrap().iter().flatten().collect();
    assert_eq!(first, [true, false, false, true]);
}

#[test]
fn a_key_upserted_twice_in_one_change_is_a_fault() {
    let mut t = table();
    let err = t.apply(&change(&[("a", 1), ("a", 2)], &[]), 0).unwrap_err();
    assert!(err.to_string().contains("two rows for one key"), "{err}");
}

#[test]
fn a_state_in_memory_counts_its_rows_and_bytes_as_one_in_the_store_does() {
    let (mut memory, mut disk) = (test_table_in_memory(schema(), 1), table());
    let changes = [
        change(&[("c", 3), ("a", 1), ("b", 2)], &[]),
        // A replace, a key upserted and deleted in one change, a delete of
        // a key the state never held, and one deleted twice.
        change(
            &[("b", 20), ("d", 4), ("e", 5)],
            &[("a", 1), ("e", 5), ("z", 0)],
        ),
        change(
            &[("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 6)],
            &[("c", 3), ("c", 3)],
        ),
        change(&[], &[("b", 20), ("d", 4)]),
    ];
    for (v, c) in changes.iter().enumerate() {
        memory.apply(c, v as u64).unwrap();
        disk.apply(c, v as u64).unwrap();
        let step = format!("change {v}");
        assert_eq!(
            pairs(&memory.scan().unwrap()),
            pairs(&disk.scan().unwrap()),
            "{step}"
        );
        assert_eq!(
            (memory.len(), memory.bytes()),
            (disk.len(), disk.bytes()),
            "{step}"
        );
    }
    assert_eq!(memory.len(), 1);
    assert!(memory.space.in_memory() && !disk.space.in_memory());
    let err = memory
        .apply(&change(&[("a", 1), ("a", 2)], &[]), 9)
        .unwrap_err();
    assert!(err.to_string().contains("two rows for one key"), "{err}");
}

#[test]
fn a_state_rebuilt_from_its_deltas_or_its_snapshot_is_the_same_state() {
    let changes = [
        change(&[("a", 1), ("b", 2)], &[]),
        change(&[("a", 5), ("c", 1)], &[]),
        change(&[("d", 7)], &[("b", 2)]),
    ];
    let mut live = table();
    let mut rebuilt = table();
    for (v, c) in changes.iter().enumerate() {
        live.apply(c, v as u64).unwrap();
        let delta = live.to_delta(c).unwrap();
        let bytes = crate::state::codec::encode(&live.delta_schema(), &[delta]).unwrap();
        let back = crate::state::codec::decode(bytes, &live.delta_schema(), "delta").unwrap();
        let c = rebuilt.read_delta(&back).unwrap();
        rebuilt.apply(&c, v as u64).unwrap();
    }
    assert_eq!(live.scan().unwrap(), rebuilt.scan().unwrap());
    assert_eq!((live.len(), live.bytes()), (rebuilt.len(), rebuilt.bytes()));
    let frozen = live.freeze().unwrap();
    let batches: Vec<RecordBatch> = frozen.batches().collect::<Result<_, _>>().unwrap();
    let snapshot = crate::state::codec::encode(live.schema(), &batches).unwrap();
    let mut loaded = table();
    let back = crate::state::codec::decode(snapshot, &schema(), "snapshot").unwrap();
    loaded.load(&back, 2).unwrap();
    assert_eq!(loaded.scan().unwrap(), live.scan().unwrap());
    assert_eq!((loaded.len(), loaded.bytes()), (live.len(), live.bytes()));
    assert!(loaded.bytes() > 0);
}

/// A snapshot written before states were kept in key order loads too.
#[test]
fn a_snapshot_out_of_key_order_loads_in_key_order() {
    let mut t = table();
    t.load(&[rows(&[("c", 3), ("a", 1)]), rows(&[("b", 2)])], 4)
        .unwrap();
    assert_eq!(
        pairs(&t.scan().unwrap()),
        owned(&[("a", 1), ("b", 2), ("c", 3)])
    );
    assert_eq!((t.len(), t.version), (3, Some(4)));
    let mut dup = table();
    let err = dup
        .load(&[rows(&[("c", 3), ("a", 1), ("c", 1)])], 4)
        .unwrap_err();
    assert!(err.to_string().contains("two rows for one key"), "{err}");
}

/// A snapshot merged with the deltas after it is the state those deltas
/// left, whether the snapshot is in key order (one sorted load) or not.
#[test]
fn a_snapshot_and_its_deltas_rebuild_the_state_they_left() {
    let snapshot = [rows(&[("b", 2), ("d", 4), ("f", 6)])];
    let deltas = [
        change(&[("a", 1), ("d", 40)], &[("f", 0)]),
        change(&[("g", 7), ("c", 3)], &[("a", 0), ("b", 0)]),
        change(&[("a", 10)], &[("zz", 0)]),
    ];
    let mut live = table();
    live.load(&snapshot, 0).unwrap();
    for (v, d) in deltas.iter().enumerate() {
        live.apply(d, v as u64 + 1).unwrap();
    }
    let want = owned(&[("a", 10), ("c", 3), ("d", 40), ("g", 7)]);
    assert_eq!(pairs(&live.scan().unwrap()), want);
    let mut merged = table();
    merged.rebuild(&snapshot, &deltas, 3).unwrap();
    assert_eq!(pairs(&merged.scan().unwrap()), want);
    assert_eq!((merged.len(), merged.bytes()), (live.len(), live.bytes()));
    let unsorted = [rows(&[("f", 6), ("b", 2), ("d", 4)])];
    let mut slow = table();
    slow.rebuild(&unsorted, &deltas, 3).unwrap();
    assert_eq!(pairs(&slow.scan().unwrap()), want);
    assert_eq!(
        (slow.len(), slow.bytes(), slow.version),
        (live.len(), live.bytes(), Some(3))
    );
    let mut deltas_only = table();
    deltas_only.rebuild(&[], &deltas[..1], 0).unwrap();
    assert_eq!(
        pairs(&deltas_only.scan().unwrap()),
        owned(&[("a", 1), ("d", 40)])
    );
}

/// A frozen state reads as it was, while the table takes the next batch.
#[test]
fn a_frozen_state_does_not_see_later_changes() {
    let mut t = table();
    t.apply(&change(&[("a", 1), ("b", 2)], &[]), 0).unwrap();
    let frozen = t.freeze().unwrap();
    t.apply(&change(&[("a", 10), ("c", 3)], &[("b", 0)]), 1)
        .unwrap();
    let then: Vec<RecordBatch> = frozen.batches().collect::<Result<_, _>>().unwrap();
    assert_eq!(pairs(&then[0]), owned(&[("a", 1), ("b", 2)]));
    assert_eq!(pairs(&t.scan().unwrap()), owned(&[("a", 10), ("c", 3)]));
}

#[test]
fn a_global_aggregate_keeps_one_row() {
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
    let one = |n: i64| {
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![n]))]).unwrap()
    };
    let mut t = test_table(schema.clone(), 0);
    let (found, new) = t.lookup(&[one(1)]).unwrap();
    assert_eq!((found.num_rows(), new), (0, 1));
    let empty = RecordBatch::new_empty(schema.clone());
    t.apply(
        &Change {
            upserts: one(5),
            deletes: empty.clone(),
        },
        0,
    )
    .unwrap();
    let (found, new) = t.lookup(&[one(1), one(2)]).unwrap();
    assert_eq!((found, new), (one(5), 0));
    t.apply(
        &Change {
            upserts: one(8),
            deletes: empty,
        },
        1,
    )
    .unwrap();
    assert_eq!(t.scan().unwrap(), one(8));
    assert_eq!(t.len(), 1);
}

/// A state whose rows are all key (a DISTINCT, a dedup) has empty values.
#[test]
fn a_state_of_keys_alone_keeps_its_keys() {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
    let keys = |k: &[&str]| {
        let a: StringArray = k.iter().map(|k| Some(*k)).collect();
        RecordBatch::try_new(schema.clone(), vec![Arc::new(a)]).unwrap()
    };
    let mut t = test_table(schema.clone(), 1);
    t.apply(
        &Change {
            upserts: keys(&["y", "x"]),
            deletes: keys(&[]),
        },
        0,
    )
    .unwrap();
    assert_eq!(t.scan().unwrap(), keys(&["x", "y"]));
}

fn stamps(b: &RecordBatch) -> Vec<i64> {
    let last = b.column(b.num_columns() - 1);
    last.as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

fn encoded(schema: &SchemaRef, batches: &[RecordBatch], what: &str) -> Vec<RecordBatch> {
    let bytes = crate::state::codec::encode(schema, batches).unwrap();
    crate::state::codec::decode(bytes, schema, what).unwrap()
}

/// A stamped state: the operator sees its own rows; deltas and snapshots
/// hold each key's stamp, and a state rebuilt from them has the same.
#[test]
fn a_stamped_state_keeps_its_stamps_through_deltas_and_snapshots() {
    let changes = [
        (100, change(&[("c", 3), ("a", 1), ("b", 2)], &[])),
        (200, change(&[("a", 5)], &[])),
        (300, change(&[("d", 1)], &[("c", 0)])),
    ];
    let (mut live, mut deltas) = (test_stamped(schema(), 1), Vec::new());
    let reader = test_stamped(schema(), 1);
    for (v, (now, c)) in changes.iter().enumerate() {
        live.set_now(*now);
        live.apply(c, v as u64).unwrap();
        let back = encoded(&live.delta_schema(), &[live.to_delta(c).unwrap()], "delta");
        deltas.push(reader.read_delta(&back).unwrap());
    }
    let stored = live.scan_stored().unwrap();
    assert_eq!(live.stored_schema().field(2).name(), TOUCHED);
    assert_eq!(stamps(&stored), [200, 100, 300]);
    // The operator's view has no stamp.
    assert_eq!(live.schema(), &schema());
    let all = live.scan().unwrap();
    assert_eq!(all.schema(), schema());
    assert_eq!(pairs(&all), owned(&[("a", 5), ("b", 2), ("d", 1)]));
    let (found, new) = live.lookup(&[rows(&[("b", 0), ("x", 0)])]).unwrap();
    assert_eq!((found, new), (rows(&[("b", 2)]), 1));

    let mut replayed = test_stamped(schema(), 1);
    replayed.rebuild(&[], &deltas, 2).unwrap();
    assert_eq!(replayed.scan_stored().unwrap(), stored);
    let frozen = live.freeze().unwrap();
    let batches: Vec<RecordBatch> = frozen.batches().collect::<Result<_, _>>().unwrap();
    let snapshot = encoded(frozen.schema(), &batches, "snapshot");
    let mut loaded = test_stamped(schema(), 1);
    loaded.rebuild(&snapshot, &deltas[2..], 2).unwrap();
    assert_eq!(loaded.scan_stored().unwrap(), stored);
    assert_eq!((loaded.len(), loaded.bytes()), (live.len(), live.bytes()));
    // Stored rows are kept as they are; operator rows need the batch's time.
    let err = test_stamped(schema(), 1)
        .apply(&changes[0].1, 0)
        .unwrap_err();
    assert!(err.to_string().contains("batch's time"), "{err}");
}

/// `expired` picks the keys whose last upsert is at least the ttl old,
/// no other; a key upserted at `now` never expires, not even at the end
/// of time; a state without stamps expires nothing.
#[test]
fn expired_picks_exactly_the_keys_idle_for_the_ttl() {
    let mut t = test_stamped(schema(), 1);
    t.set_now(1_000);
    t.apply(&change(&[("a", 1), ("b", 1), ("c", 1)], &[]), 0)
        .unwrap();
    t.set_now(1_400);
    t.apply(&change(&[("b", 2)], &[]), 1).unwrap();
    assert_eq!(t.expired(500, 1_499).unwrap().num_rows(), 0);
    let gone = t.expired(500, 1_500).unwrap();
    assert_eq!(gone.schema(), schema());
    assert_eq!(pairs(&gone), owned(&[("a", 1), ("c", 1)]));
    let idle = owned(&[("a", 1), ("b", 2), ("c", 1)]);
    assert_eq!(pairs(&t.expired(500, 1_900).unwrap()), idle);
    assert_eq!(t.expired(500, i64::MIN).unwrap().num_rows(), 0);
    t.set_now(i64::MAX);
    t.apply(&change(&[("c", 9)], &[]), 2).unwrap();
    let left = owned(&[("a", 1), ("b", 2)]);
    assert_eq!(pairs(&t.expired(1, i64::MAX).unwrap()), left);
    let mut plain = table();
    plain.apply(&change(&[("a", 1)], &[]), 0).unwrap();
    assert_eq!(plain.expired(1, i64::MAX).unwrap().num_rows(), 0);
}

/// Many rows: scans cross the decoder's chunks, and len and bytes follow
/// every change.
#[test]
fn a_large_state_scans_whole_and_counts_exactly() {
    let mut t = table();
    let many: Vec<(String, i64)> = (0..150_000).map(|i| (format!("k{i:07}"), i)).collect();
    let batch = |p: &[(String, i64)]| {
        let r: Vec<(&str, i64)> = p.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        rows(&r)
    };
    t.apply(
        &Change {
            upserts: batch(&many),
            deletes: rows(&[]),
        },
        0,
    )
    .unwrap();
    let gone = batch(&many[..1000]);
    t.apply(
        &Change {
            upserts: rows(&[]),
            deletes: gone,
        },
        1,
    )
    .unwrap();
    let all = t.scan().unwrap();
    assert_eq!(all.num_rows(), 149_000);
    assert_eq!(t.len(), 149_000);
    assert_eq!(pairs(&all)[0], ("k0001000".to_string(), 1000));
    let mut fresh = table();
    fresh.load(&[all], 1).unwrap();
    assert_eq!(fresh.bytes(), t.bytes());
}

/// Times lookups and changes of 1% of a large state (not run by default:
/// `cargo test --release -p sluice-executor -- --ignored --nocapture timing`).
#[test]
#[ignore]
fn timing_of_a_change_to_a_large_state() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let keys: i64 = std::env::var("KEYS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(1_250_000);
    let touch = keys / 100;
    let batch = |from: i64, n: i64, v: i64| {
        let k: Int64Array = (from..from + n).map(|i| Some((i * 7919) % keys)).collect();
        let c: Int64Array = (0..n).map(|_| Some(v)).collect();
        RecordBatch::try_new(schema.clone(), vec![Arc::new(k), Arc::new(c)]).unwrap()
    };
    let mut t = test_table(schema.clone(), 1);
    let started = std::time::Instant::now();
    let step = 100_000;
    for (v, from) in (0..keys).step_by(step as usize).enumerate() {
        let upserts = batch(from, step.min(keys - from), 1);
        let deletes = RecordBatch::new_empty(schema.clone());
        t.apply(&Change { upserts, deletes }, v as u64).unwrap();
    }
    eprintln!("fill {keys} keys: {:?}", started.elapsed());
    for round in 0..5 {
        let probe = batch(round * touch, touch, 2);
        let t0 = std::time::Instant::now();
        let found = t.find(std::slice::from_ref(&probe)).unwrap();
        let t1 = t0.elapsed();
        let deletes = RecordBatch::new_empty(schema.clone());
        t.apply(
            &Change {
                upserts: probe,
                deletes,
            },
            100 + round as u64,
        )
        .unwrap();
        let t2 = t0.elapsed();
        eprintln!(
            "touch {touch}: find {t1:?} ({} found), find+apply {t2:?}",
            found.rows.num_rows()
        );
    }
    let t0 = std::time::Instant::now();
    let frozen = t.freeze().unwrap();
    let bytes = crate::state::codec::encode_each(&schema, frozen.batches()).unwrap();
    let t1 = t0.elapsed();
    let rows = crate::state::codec::decode(bytes, &schema, "snapshot").unwrap();
    let t2 = t0.elapsed();
    let mut loaded = test_table(schema.clone(), 1);
    loaded.load(&rows, 1).unwrap();
    let t3 = t0.elapsed();
    eprintln!(
        "snapshot {t1:?}, decoded {:?}, loaded {:?}",
        t2 - t1,
        t3 - t2
    );
}

#[test]
fn keys_vouched_new_are_applied_without_a_read_and_counted_the_same() {
    let mut read = table();
    let mut vouched = table();
    for t in [&mut read, &mut vouched] {
        t.apply(&change(&[("a", 1)], &[]), 0).unwrap();
    }
    let next = change(&[("b", 2), ("c", 3)], &[("a", 1)]);
    vouched.vouch_new(&rows(&[("b", 2), ("c", 3)])).unwrap();
    read.apply(&next, 1).unwrap();
    vouched.apply(&next, 1).unwrap();
    assert_eq!(
        pairs(&vouched.scan().unwrap()),
        owned(&[("b", 2), ("c", 3)])
    );
    assert_eq!((vouched.len(), vouched.bytes()), (read.len(), read.bytes()));
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "a key vouched new is in the state")]
fn vouching_for_a_held_key_is_a_fault_in_debug_builds() {
    let mut t = table();
    t.apply(&change(&[("a", 1)], &[]), 0).unwrap();
    t.vouch_new(&rows(&[("a", 5)])).unwrap();
}

#[test]
fn a_scan_by_the_leading_key_column_reads_that_values_rows_in_key_order() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("side", DataType::UInt8, false),
        Field::new("id", DataType::UInt64, false),
        Field::new("v", DataType::Utf8, true),
    ]));
    let mut t = test_table(schema.clone(), 2);
    let (sides, ids, vs): (Vec<u8>, Vec<u64>, Vec<&str>) = (
        vec![1, 0, 1, 0, 2],
        vec![7, 300, 1, 2, 0],
        vec!["r7", "l300", "r1", "l2", "x"],
    );
    let upserts = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(arrow_array::UInt8Array::from(sides)),
            Arc::new(arrow_array::UInt64Array::from(ids)),
            Arc::new(StringArray::from(vs)),
        ],
    )
    .unwrap();
    let deletes = RecordBatch::new_empty(schema);
    t.apply(&Change { upserts, deletes }, 0).unwrap();
    let of = |side: u8| -> Vec<String> {
        let leading: ArrayRef = Arc::new(arrow_array::UInt8Array::from(vec![side]));
        let rows = t.scan_prefix(&[leading]).unwrap();
        let v = rows
            .column(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        v.iter().map(|s| s.unwrap().to_string()).collect()
    };
    assert_eq!(of(0), ["l2", "l300"]);
    assert_eq!(of(1), ["r1", "r7"]);
    assert_eq!(of(3), Vec::<String>::new());
    let two: Vec<ArrayRef> = vec![
        Arc::new(arrow_array::UInt8Array::from(vec![0u8])),
        Arc::new(arrow_array::UInt64Array::from(vec![300u64])),
    ];
    assert_eq!(t.scan_prefix(&two).unwrap().num_rows(), 1);
    let too_many = [two.clone(), two].concat();
    assert!(t.scan_prefix(&too_many).is_err());
}

#[test]
fn a_scan_by_keys_keeps_the_rows_whose_keys_it_selects_whole_on_either_tier() {
    // More rows than one chunk of a scan, so that chunks are filtered
    // and joined.
    let many: Vec<(String, i64)> = (0..70_000).map(|i| (format!("k{i:06}"), i)).collect();
    let r: Vec<(&str, i64)> = many.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    let wanted: Vec<(String, i64)> = many.iter().filter(|(_, n)| n % 7 == 3).cloned().collect();
    for mut t in [table(), test_table_in_memory(schema(), 1)] {
        t.apply(&change(&r, &[]), 0).unwrap();
        let mut seen = 0;
        let kept = t
            .scan_keys_where(|keys| {
                assert_eq!(keys.len(), 1, "only the key columns are decoded");
                let k = keys[0].as_any().downcast_ref::<StringArray>().unwrap();
                seen += arrow_array::Array::len(k);
                Ok(k.iter()
                    .map(|k| k.map(|k| k[1..].parse::<i64>().unwrap() % 7 == 3))
                    .collect())
            })
            .unwrap();
        assert_eq!(seen, 70_000);
        assert_eq!(pairs(&kept), wanted);
    }
}
