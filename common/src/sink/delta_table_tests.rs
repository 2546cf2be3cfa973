use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};

use super::*;
use crate::sink::delta::schema_string;

#[test]
fn data_files_hold_the_types_delta_readers_expect() {
    let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let inner = Fields::from(vec![Field::new("at", DataType::Date64, true)]);
    let output = Schema::new(vec![
        Field::new("t", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("n", DataType::UInt32, true),
        Field::new("s", DataType::Utf8View, true),
        Field::new("d", dict, true),
        Field::new("nested", DataType::Struct(inner), true),
        Field::new_large_list("xs", Field::new("item", DataType::UInt8, true), true),
    ]);
    let files = file_schema(&output).unwrap();
    let types: Vec<&DataType> = files.fields().iter().map(|f| f.data_type()).collect();
    assert_eq!(
        types[..4],
        [
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            &DataType::Int64,
            &DataType::Utf8,
            &DataType::Utf8
        ]
    );
    let DataType::Struct(inner) = types[4] else {
        panic!("{:?}", types[4])
    };
    assert_eq!(inner[0].data_type(), &DataType::Date32);
    assert_eq!(
        types[5],
        &DataType::List(Arc::new(Field::new("item", DataType::Int16, true)))
    );
    assert!(!files.field(0).is_nullable(), "nullability is kept");
    // Each file type is the one the table's schema names.
    assert_eq!(
        schema_string(&files).unwrap(),
        schema_string(&output).unwrap()
    );
    let bad = Schema::new(vec![Field::new(
        "u",
        DataType::Struct(vec![Field::new("big", DataType::UInt64, true)].into()),
        true,
    )]);
    let e = file_schema(&bad).unwrap_err().to_string();
    assert!(e.contains("`u.big`") && e.contains("UInt64"), "{e}");
}

#[test]
fn only_types_whose_values_name_directories_exactly_partition() {
    assert!(partitions_by(&DataType::Utf8));
    assert!(partitions_by(&DataType::Int64));
    assert!(partitions_by(&DataType::Date32));
    assert!(!partitions_by(&DataType::Float64));
    assert!(!partitions_by(&DataType::Timestamp(
        TimeUnit::Millisecond,
        None
    )));
}

#[test]
fn partition_values_come_back_from_the_path_unescaped_with_nulls() {
    let cols = ["day".to_string(), "city".to_string()];
    let got = partition_values(
        "day=2026-12-07/city=a%2Fb c/part-00000000000000000001-00000.q.parquet",
        &cols,
    )
    .unwrap();
    assert_eq!(
        got,
        [
            ("day".into(), Some("2026-12-07".into())),
            ("city".into(), Some("a/b c".into()))
        ]
    );
    let null = partition_values(&format!("day=1/city={HIVE_NULL}/p.parquet"), &cols).unwrap();
    assert_eq!(null[1].1, None);
    assert_eq!(partition_values("p.parquet", &[]).unwrap(), []);
    for (path, says) in [
        ("day=1/p.parquet", "1 directories deep"),
        (
            "city=1/day=2/p.parquet",
            "does not name partition column \"day\"",
        ),
        ("day=1/city/p.parquet", "is not `column=value`"),
    ] {
        let e = partition_values(path, &cols).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains(path), "{e}");
    }
}

#[test]
fn add_paths_are_relative_uris() {
    assert_eq!(
        add_path("city=a%2Fb c/part-1.q.parquet"),
        "city=a%252Fb%20c/part-1.q.parquet"
    );
    assert_eq!(add_path("part-1.parquet"), "part-1.parquet");
}

#[test]
fn the_newest_metadata_of_a_commit_is_read_back() {
    let commit = concat!(
        r#"{"commitInfo":{"timestamp":1}}"#,
        "\n",
        r#"{"metaData":{"id":"x","schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":["day"],"format":{"provider":"parquet"}}}"#,
        "\n"
    );
    let meta = metadata_of(commit.as_bytes(), "c").unwrap().unwrap();
    assert_eq!(meta.partition_columns, ["day"]);
    assert!(meta.schema_string.contains("struct"));
    assert_eq!(metadata_of(b"{\"txn\":{}}\n", "c").unwrap(), None);
    let e = metadata_of(b"{\"metaData\":{}}\n", "c")
        .unwrap_err()
        .to_string();
    assert!(e.contains("schemaString"), "{e}");
}

#[test]
fn a_changed_output_is_described_column_by_column() {
    let table = schema_string(&Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Utf8, true),
        Field::new("gone", DataType::Utf8, true),
    ]))
    .unwrap();
    let same = schema_string(&Schema::new(vec![
        Field::new("b", DataType::Utf8View, true),
        Field::new("a", DataType::UInt32, false),
        Field::new("gone", DataType::Utf8, true),
    ]))
    .unwrap();
    assert_eq!(
        schema_difference(&table, &same).unwrap(),
        Vec::<String>::new()
    );
    let ours = schema_string(&Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int32, true),
        Field::new("new", DataType::Utf8, true),
    ]))
    .unwrap();
    let got = schema_difference(&table, &ours).unwrap();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].contains("`a` holds no nulls"), "{got:?}");
    assert!(
        got[1].contains("`b` is \"string\" in the table and \"integer\""),
        "{got:?}"
    );
    assert!(got[2].contains("`new` is in the query's output"), "{got:?}");
    assert!(got[3].contains("`gone` is in the table"), "{got:?}");
}

#[test]
fn naive_timestamps_are_taken_as_utc_and_only_change_unit() {
    use arrow_array::{Array, TimestampMillisecondArray};
    let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![Some(1_500), None]));
    let to = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let got = file_column(&ms, &to).unwrap();
    assert_eq!(got.data_type(), &to);
    let got = got.as_primitive::<TimestampMicrosecondType>();
    assert_eq!((got.value(0), got.is_null(1)), (1_500_000, true));
    let same: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![7]));
    assert_eq!(
        file_column(&same, &DataType::Int64).unwrap().as_ref(),
        same.as_ref()
    );
}

#[test]
fn a_protocol_beyond_reader_1_and_writer_2_is_refused_naming_its_features() {
    let commit = |p: &str| format!("{{\"commitInfo\":{{}}}}\n{{\"protocol\":{p}}}\n");
    let plain = commit(r#"{"minReaderVersion":1,"minWriterVersion":2}"#);
    let p = protocol_of(plain.as_bytes(), "v0")
        .unwrap()
        .expect("a protocol");
    assert_eq!((p.reader, p.writer), (1, 2));
    assert_eq!(p.refusal(), None);
    let dv = commit(
        r#"{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors","appendOnly"]}"#,
    );
    let why = protocol_of(dv.as_bytes(), "v3")
        .unwrap()
        .unwrap()
        .refusal()
        .unwrap();
    assert!(
        why.contains("reader version 3 and writer version 7")
            && why.contains("features: appendOnly, deletionVectors"),
        "{why}"
    );
    let cdf = commit(r#"{"minReaderVersion":1,"minWriterVersion":4}"#);
    assert!(
        protocol_of(cdf.as_bytes(), "v1")
            .unwrap()
            .unwrap()
            .refusal()
            .is_some()
    );
    assert_eq!(protocol_of(b"{\"commitInfo\":{}}\n", "v2").unwrap(), None);
    let e = protocol_of(b"{\"protocol\":{\"minReaderVersion\":1}}\n", "v5").unwrap_err();
    assert!(e.to_string().contains("minWriterVersion"), "{e}");
}
