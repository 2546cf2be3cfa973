use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]))
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

fn change(upserts: &[(&str, i64)], deletes: &[(&str, i64)]) -> Change {
    Change {
        upserts: rows(upserts),
        deletes: rows(deletes),
    }
}

#[test]
fn a_change_replaces_keys_in_place_of_order_and_appends_new_ones() {
    let mut t = StateTable::new(schema(), 1).unwrap();
    t.apply(&change(&[("a", 1), ("b", 2), ("c", 3)], &[]), 0)
        .unwrap();
    t.apply(&change(&[("b", 20), ("d", 4)], &[("a", 1)]), 1)
        .unwrap();
    let want = [("c", 3), ("b", 20), ("d", 4)];
    let want: Vec<(String, i64)> = want.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    assert_eq!(pairs(t.rows()), want);
    assert_eq!(t.version, Some(1));

    let (found, new) = t
        .lookup(&[rows(&[("d", 9), ("x", 1), ("d", 1), ("c", 1)])])
        .unwrap();
    assert_eq!(pairs(&found), [("d".to_string(), 4), ("c".to_string(), 3)]);
    assert_eq!(new, 1);
}

#[test]
fn a_state_rebuilt_from_its_deltas_is_the_same_state() {
    let changes = [
        change(&[("a", 1), ("b", 2)], &[]),
        change(&[("a", 5), ("c", 1)], &[]),
        change(&[("d", 7)], &[("b", 2)]),
    ];
    let mut live = StateTable::new(schema(), 1).unwrap();
    let mut rebuilt = StateTable::new(schema(), 1).unwrap();
    for (v, c) in changes.iter().enumerate() {
        live.apply(c, v as u64).unwrap();
        let delta = live.to_delta(c).unwrap();
        let bytes = crate::state::codec::encode(&live.delta_schema(), &[delta]).unwrap();
        let back = crate::state::codec::decode(bytes, &live.delta_schema(), "delta").unwrap();
        let c = rebuilt.read_delta(&back).unwrap();
        rebuilt.apply(&c, v as u64).unwrap();
    }
    assert_eq!(live.rows(), rebuilt.rows());
    let snapshot = crate::state::codec::encode(live.schema(), &[live.rows().clone()]).unwrap();
    let mut loaded = StateTable::new(schema(), 1).unwrap();
    let back = crate::state::codec::decode(snapshot, &schema(), "snapshot").unwrap();
    loaded.load(&back, 2).unwrap();
    assert_eq!(loaded.rows(), live.rows());
    assert!(loaded.bytes() > 0);
}

#[test]
fn a_global_aggregate_keeps_one_row() {
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
    let one = |n: i64| {
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![n]))]).unwrap()
    };
    let mut t = StateTable::new(schema.clone(), 0).unwrap();
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
    assert_eq!(t.rows(), &one(8));
}

/// The index that appends and deletes keep up to date finds each row
/// where an index built from scratch over the same rows does.
#[test]
fn the_index_kept_up_to_date_is_the_index_built_anew() {
    let mut t = StateTable::new(schema(), 1).unwrap();
    t.apply(&change(&[("a", 1), ("b", 2), ("c", 3), ("d", 4)], &[]), 0)
        .unwrap();
    t.apply(&change(&[("e", 5), ("f", 6)], &[("b", 0), ("e", 0)]), 1)
        .unwrap();
    t.apply(&change(&[("g", 7)], &[("a", 0)]), 2).unwrap();
    let mut anew = StateTable::new(schema(), 1).unwrap();
    anew.load(std::slice::from_ref(t.rows()), 2).unwrap();
    assert_eq!(
        pairs(t.rows()),
        [("c", 3), ("d", 4), ("f", 6), ("g", 7)].map(|(k, n)| (k.to_string(), n))
    );
    let probe = rows(&[("g", 0), ("a", 0), ("c", 0), ("f", 0), ("b", 0), ("d", 0)]);
    let (found, new) = t.lookup(std::slice::from_ref(&probe)).unwrap();
    let (found_anew, new_anew) = anew.lookup(std::slice::from_ref(&probe)).unwrap();
    assert_eq!(pairs(&found), pairs(&found_anew));
    assert_eq!((new, t.bytes()), (new_anew, anew.bytes()));
    assert_eq!(
        pairs(&found),
        [("g", 7), ("c", 3), ("f", 6), ("d", 4)].map(|(k, n)| (k.to_string(), n))
    );
}
