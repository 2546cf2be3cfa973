use super::*;
use crate::sink::iceberg::schema::Column;

fn columns() -> Vec<Column> {
    vec![Column {
        id: 1,
        name: "value".into(),
        required: true,
        type_name: "long".into(),
    }]
}

fn snapshot(id: i64, parent: Option<i64>, seq: i64, summary: BTreeMap<String, String>) -> Snapshot {
    Snapshot {
        snapshot_id: id,
        parent_snapshot_id: parent,
        sequence_number: seq,
        timestamp_ms: 1000 + seq,
        manifest_list: format!("/t/metadata/snap-{id}.avro"),
        summary,
        schema_id: Some(0),
        rest: Map::new(),
    }
}

#[test]
fn appends_chain_snapshots_and_the_query_finds_its_newest_batch() {
    let t0 = TableMetadata::create("/w/db.db/t/", columns(), 5);
    assert_eq!(t0.location, "/w/db.db/t");
    assert!(t0.unpartitioned());
    assert_eq!(standing(&t0, "q").unwrap(), None);
    let s = summary(("q", 0), (2, 10, 300), None);
    assert_eq!(s["total-records"], "10");
    let t1 = t0.append(
        snapshot(11, None, 1, s),
        "/w/db.db/t/metadata/00000-a.metadata.json",
    );
    // Another writer's snapshot on top.
    let other = summary(("other", 7), (1, 1, 1), t1.current());
    let t2 = t1.append(snapshot(22, Some(11), 2, other), "m1");
    assert_eq!(t2.current_snapshot_id, Some(22));
    assert_eq!(t2.last_sequence_number, 2);
    assert_eq!(t2.refs["main"]["snapshot-id"], 22);
    assert_eq!(t2.metadata_log.len(), 2);
    assert_eq!(standing(&t2, "q").unwrap(), Some(0));
    assert_eq!(standing(&t2, "other").unwrap(), Some(7));
    let s = summary(("q", 5), (1, 5, 50), t2.current());
    assert_eq!(s["total-records"], "16");
    assert_eq!(s["total-data-files"], "4");
    let t3 = t2.append(snapshot(33, Some(22), 3, s), "m2");
    assert_eq!(standing(&t3, "q").unwrap(), Some(5));
    let ids: Vec<i64> = t3.ancestry().map(|s| s.snapshot_id).collect();
    assert_eq!(ids, [33, 22, 11]);

    // What was written reads back the same, unknown fields included.
    let mut text: Value = serde_json::from_slice(&t3.encode()).unwrap();
    text["some-future-field"] = json!({"x": 1});
    let bytes = serde_json::to_vec(&text).unwrap();
    let back = TableMetadata::parse("m3", &bytes).unwrap();
    assert_eq!(back.rest["some-future-field"], json!({"x": 1}));
    assert_eq!(back.snapshots, t3.snapshots);
}

#[test]
fn a_snapshot_off_the_current_branch_is_not_the_querys() {
    let t = TableMetadata::create("/t", columns(), 0);
    let t = t.append(
        snapshot(1, None, 1, summary(("q", 0), (1, 1, 1), None)),
        "m0",
    );
    // Rolled back to no snapshot: batch 0 is not in the table any more.
    let mut rolled = t.clone();
    rolled.current_snapshot_id = None;
    assert_eq!(standing(&rolled, "q").unwrap(), None);
    let mut broken = t.clone();
    broken.snapshots[0].summary.remove(BATCH_KEY);
    let e = standing(&broken, "q").unwrap_err().to_string();
    assert!(e.contains(BATCH_KEY), "{e}");
}

#[test]
fn tables_of_other_versions_and_bad_files_are_refused_by_name() {
    let mut t: Value =
        serde_json::from_slice(&TableMetadata::create("/t", columns(), 0).encode()).unwrap();
    t["current-snapshot-id"] = json!(-1);
    let read = TableMetadata::parse("m", &serde_json::to_vec(&t).unwrap()).unwrap();
    assert_eq!(read.current_snapshot_id, None, "-1 is no snapshot");
    t["format-version"] = json!(1);
    let e = TableMetadata::parse("m", &serde_json::to_vec(&t).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("format version 1"), "{e}");
    let e = TableMetadata::parse("/t/metadata/x.json", b"{}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/t/metadata/x.json"), "{e}");
}

#[test]
fn metadata_files_are_numbered_after_the_previous_one() {
    assert!(next_metadata_name(None).starts_with("metadata/00000-"));
    let next = next_metadata_name(Some("s3://b/t/metadata/00041-9f.metadata.json"));
    assert!(next.starts_with("metadata/00042-"), "{next}");
    assert!(next.ends_with(".metadata.json"));
    // A name of another convention starts again at 0, with a fresh uuid.
    assert!(
        next_metadata_name(Some("/t/metadata/v3.metadata.json")).starts_with("metadata/00000-")
    );
}
