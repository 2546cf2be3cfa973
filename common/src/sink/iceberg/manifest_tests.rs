use super::*;
use crate::sink::iceberg::schema::Column;

fn table() -> TableMetadata {
    let columns = vec![Column {
        id: 1,
        name: "value".into(),
        required: false,
        type_name: "long".into(),
    }];
    TableMetadata::create("/w/t", columns, 0)
}

fn new_manifest(n: i64) -> NewManifest {
    NewManifest {
        path: format!("/w/t/metadata/m{n}.avro"),
        length: 100 + n as u64,
        snapshot_id: n,
        files: 2,
        records: 10 * n as u64,
        ..Default::default()
    }
}

#[test]
fn a_manifest_lists_its_files_as_added_by_its_snapshot() {
    let files = [
        DataFile {
            path: "/w/t/data/a.parquet".into(),
            records: 3,
            bytes: 30,
        },
        DataFile {
            path: "/w/t/data/b.parquet".into(),
            records: 4,
            bytes: 40,
        },
    ];
    let entries: Vec<Entry> = files.iter().cloned().map(|f| Entry::added(77, f)).collect();
    let bytes = encode_manifest(&table(), &entries).unwrap();
    let read = read_manifest("m", &bytes, 5).unwrap();
    assert_eq!(read[1].file, files[1]);
    assert_eq!(
        (read[1].status, read[1].sequence_number),
        (Status::Added, Some(5))
    );
    let reader = Reader::new(&bytes[..]).unwrap();
    let meta = reader.user_metadata();
    assert_eq!(meta["format-version"], b"2");
    assert_eq!(meta["content"], b"data");
    let schema: serde_json::Value = serde_json::from_slice(&meta["schema"]).unwrap();
    assert_eq!(schema["fields"][0]["id"], 1);
    let entries: Vec<Value> = reader.map(Result::unwrap).collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(field(&entries[1], "status"), Some(&Value::Int(1)));
    assert_eq!(
        field(&entries[1], "snapshot_id"),
        Some(&union(1, Value::Long(77)))
    );
    let data = field(&entries[1], "data_file").unwrap();
    assert_eq!(
        field(data, "file_path"),
        Some(&Value::String("/w/t/data/b.parquet".into()))
    );
    assert_eq!(field(data, "record_count"), Some(&Value::Long(4)));
}

#[test]
fn each_manifest_list_keeps_its_parents_entries_then_adds_its_own() {
    let first = encode_manifest_list((1, None, 1), Vec::new(), &new_manifest(1)).unwrap();
    let read = read_manifest_list("l1", &first).unwrap();
    assert_eq!(read.len(), 1);
    let second = encode_manifest_list((2, Some(1), 2), read, &new_manifest(2)).unwrap();
    let read = read_manifest_list("l2", &second).unwrap();
    let paths: Vec<_> = read
        .iter()
        .map(|e| field(e, "manifest_path").cloned())
        .collect();
    assert_eq!(
        paths,
        [
            Some(Value::String("/w/t/metadata/m1.avro".into())),
            Some(Value::String("/w/t/metadata/m2.avro".into()))
        ]
    );
    assert_eq!(field(&read[0], "sequence_number"), Some(&Value::Long(1)));
    assert_eq!(field(&read[1], "sequence_number"), Some(&Value::Long(2)));
    assert_eq!(field(&read[1], "added_rows_count"), Some(&Value::Long(20)));
    let meta = Reader::new(&second[..]).unwrap().user_metadata().clone();
    assert_eq!(meta["parent-snapshot-id"], b"1");
}

/// A list another writer wrote, in the older field names, with a field
/// this schema does not have and without the optional ones, is read into
/// the v2 schema by field id.
#[test]
fn a_list_of_another_writer_is_resolved() {
    let theirs = Schema::parse_str(
        r#"{"type": "record", "name": "manifest_file", "fields": [
          {"name": "manifest_path", "type": "string", "field-id": 500},
          {"name": "manifest_length", "type": "long", "field-id": 501},
          {"name": "partition_spec_id", "type": "int", "field-id": 502},
          {"name": "content", "type": "int", "field-id": 517},
          {"name": "sequence_number", "type": "long", "field-id": 515},
          {"name": "min_sequence_number", "type": "long", "field-id": 516},
          {"name": "added_snapshot_id", "type": "long", "field-id": 503},
          {"name": "added_data_files_count", "type": "int", "field-id": 504},
          {"name": "existing_data_files_count", "type": "int", "field-id": 505},
          {"name": "deleted_data_files_count", "type": "int", "field-id": 506},
          {"name": "added_rows_count", "type": "long", "field-id": 512},
          {"name": "existing_rows_count", "type": "long", "field-id": 513},
          {"name": "deleted_rows_count", "type": "long", "field-id": 514},
          {"name": "first_row_id", "type": ["null", "long"], "default": null, "field-id": 520}]}"#,
    )
    .unwrap();
    let mut w = Writer::with_codec(&theirs, Vec::new(), deflate()).unwrap();
    let mut r = Record::new(&theirs).unwrap();
    for (k, v) in [
        (
            "manifest_path",
            Value::String("/w/t/metadata/java.avro".into()),
        ),
        ("manifest_length", Value::Long(5)),
        ("partition_spec_id", Value::Int(0)),
        ("content", Value::Int(0)),
        ("sequence_number", Value::Long(4)),
        ("min_sequence_number", Value::Long(4)),
        ("added_snapshot_id", Value::Long(9)),
        ("added_data_files_count", Value::Int(3)),
        ("existing_data_files_count", Value::Int(0)),
        ("deleted_data_files_count", Value::Int(0)),
        ("added_rows_count", Value::Long(30)),
        ("existing_rows_count", Value::Long(0)),
        ("deleted_rows_count", Value::Long(0)),
        ("first_row_id", union(0, Value::Null)),
    ] {
        r.put(k, v);
    }
    w.append_value(r).unwrap();
    let bytes = w.into_inner().unwrap();
    let read = read_manifest_list("theirs", &bytes).unwrap();
    assert_eq!(field(&read[0], "added_files_count"), Some(&Value::Int(3)));
    let ours = encode_manifest_list((10, Some(9), 5), read, &new_manifest(10)).unwrap();
    assert_eq!(read_manifest_list("ours", &ours).unwrap().len(), 2);
    let e = read_manifest_list("/w/t/metadata/bad.avro", b"nope").unwrap_err();
    assert!(e.to_string().contains("/w/t/metadata/bad.avro"), "{e}");
}

/// A compaction's manifest: its new file added, the files it rewrote
/// deleted and the rest existing, each with explicit sequence numbers;
/// its list entry counts each kind.
#[test]
fn a_manifest_of_every_status_reads_back_and_counts_in_its_list() {
    let file = |n: u64| DataFile {
        path: format!("/w/t/data/{n}.parquet"),
        records: n,
        bytes: 10 * n,
    };
    let old = |status, n| Entry {
        status,
        snapshot_id: 3,
        sequence_number: Some(2),
        file_sequence_number: Some(2),
        file: file(n),
    };
    let entries = vec![
        Entry::added(9, file(7)),
        old(Status::Deleted, 3),
        old(Status::Deleted, 4),
        old(Status::Existing, 5),
    ];
    let bytes = encode_manifest(&table(), &entries).unwrap();
    let read = read_manifest("m", &bytes, 6).unwrap();
    assert_eq!(read[1..], entries[1..]);
    assert_eq!(read[0].sequence_number, Some(6), "inherited");
    let m = NewManifest::of(
        "/w/t/metadata/c.avro".into(),
        bytes.len() as u64,
        9,
        &entries,
    );
    assert_eq!(
        (m.files, m.records, m.existing, m.deleted),
        (1, 7, (1, 5), (2, 7))
    );
    assert_eq!(m.min_sequence, Some(2));
    let list = encode_manifest_list((9, Some(8), 6), Vec::new(), &m).unwrap();
    let e = &read_manifest_list("l", &list).unwrap()[0];
    assert_eq!(field(e, "min_sequence_number"), Some(&Value::Long(2)));
    assert_eq!(field(e, "deleted_rows_count"), Some(&Value::Long(7)));
}
