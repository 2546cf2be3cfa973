use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use serde_json::{Value, json};

use super::*;

fn lines(commit: &str) -> Vec<Value> {
    assert!(commit.ends_with('\n'), "a commit ends its last line");
    commit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn commit_names_are_twenty_digits_and_only_commits_have_a_version() {
    assert_eq!(commit_name(7), "_delta_log/00000000000000000007.json");
    assert_eq!(version_of("00000000000000000007.json"), Some(7));
    assert_eq!(version_of("00000000000000000010.checkpoint.parquet"), None);
    assert_eq!(version_of("00000000000000000010.crc"), None);
    assert_eq!(version_of("_last_checkpoint"), None);
    assert_eq!(version_of("0000000000000000007.json"), None);
    assert_eq!(version_of(".00000000000000000007.json.tmp"), None);
}

#[test]
fn a_schema_maps_to_deltas_types_with_nesting_and_nullability() {
    let item = Arc::new(Field::new("item", DataType::Int32, false));
    let entries = Field::new(
        "entries",
        DataType::Struct(Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Float64, true),
        ])),
        false,
    );
    let schema = Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("name", DataType::Utf8View, true),
        Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("price", DataType::Decimal128(12, 2), true),
        Field::new("day", DataType::Date32, true),
        Field::new("bids", DataType::List(item), true),
        Field::new("extra", DataType::Map(Arc::new(entries), false), true),
        Field::new(
            "w",
            DataType::Struct(Fields::from(vec![Field::new(
                "start",
                DataType::UInt32,
                true,
            )])),
            true,
        ),
    ]);
    let parsed: Value = serde_json::from_str(&schema_string(&schema).unwrap()).unwrap();
    let f = |name: &str, t: Value, nullable: bool| json!({"name": name, "type": t, "nullable": nullable, "metadata": {}});
    let expected = json!({"type": "struct", "fields": [
        f("auction", json!("long"), false),
        f("name", json!("string"), true),
        f("t", json!("timestamp"), true),
        f("price", json!("decimal(12,2)"), true),
        f("day", json!("date"), true),
        f("bids", json!({"type": "array", "elementType": "integer", "containsNull": false}), true),
        f("extra", json!({"type": "map", "keyType": "string", "valueType": "double",
                          "valueContainsNull": true}), true),
        f("w", json!({"type": "struct", "fields": [f("start", json!("long"), true)]}), true),
    ]});
    assert_eq!(parsed, expected);
}

#[test]
fn a_type_delta_cannot_hold_is_refused_naming_its_column() {
    let schema = Schema::new(vec![
        Field::new("ok", DataType::Int64, true),
        Field::new(
            "w",
            DataType::Struct(Fields::from(vec![Field::new(
                "gap",
                DataType::Duration(TimeUnit::Second),
                true,
            )])),
            true,
        ),
    ]);
    let err = schema_string(&schema).unwrap_err().to_string();
    assert!(err.contains("column `w.gap`"), "{err}");
    assert!(err.contains("Duration"), "{err}");
}

fn file(path: &str, day: Option<&str>) -> AddFile {
    AddFile {
        path: path.into(),
        partition_values: vec![("day".into(), day.map(Into::into))],
        size: 1234,
        modification_time_ms: 1_700_000_000_000,
        num_records: 42,
    }
}

#[test]
fn the_first_commit_creates_the_table_and_each_records_its_batch() {
    let table = NewTable {
        id: "5b1f0f5e-0000-4000-8000-000000000000".into(),
        schema_string: r#"{"type":"struct","fields":[]}"#.into(),
        partition_columns: vec!["day".into()],
    };
    let files = [
        file("day=1/a.parquet", Some("1")),
        file("day=__HIVE_DEFAULT_PARTITION__/b.parquet", None),
    ];
    let first = Commit {
        created: Some(&table),
        files: &files,
        app_id: "q-1",
        batch: 0,
        now_ms: 5,
    };
    let actions = lines(&first.encode());
    let kinds: Vec<&str> = actions
        .iter()
        .map(|a| a.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(
        kinds,
        ["commitInfo", "protocol", "metaData", "add", "add", "txn"]
    );
    assert_eq!(
        actions[1]["protocol"],
        json!({"minReaderVersion": 1, "minWriterVersion": 2})
    );
    let meta = &actions[2]["metaData"];
    assert_eq!(meta["id"], table.id.as_str());
    assert_eq!(meta["schemaString"], table.schema_string.as_str());
    assert_eq!(meta["partitionColumns"], json!(["day"]));
    assert_eq!(meta["format"]["provider"], "parquet");
    let add = &actions[3]["add"];
    assert_eq!(add["path"], "day=1/a.parquet");
    assert_eq!(add["partitionValues"], json!({"day": "1"}));
    assert_eq!(actions[4]["add"]["partitionValues"], json!({"day": null}));
    assert_eq!(
        (add["size"].as_u64(), add["dataChange"].as_bool()),
        (Some(1234), Some(true))
    );
    let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
    assert_eq!(stats["numRecords"], 42);
    assert_eq!(actions[5]["txn"]["appId"], "q-1");
    assert_eq!(actions[5]["txn"]["version"], 0);

    // A later commit adds files and moves the query's version on, and
    // says nothing of the table.
    let later = Commit {
        created: None,
        files: &files[..1],
        app_id: "q-1",
        batch: 9,
        now_ms: 6,
    };
    let encoded = later.encode();
    let kinds: Vec<String> = lines(&encoded)
        .iter()
        .map(|a| a.as_object().unwrap().keys().next().unwrap().clone())
        .collect();
    assert_eq!(kinds, ["commitInfo", "add", "txn"]);
    assert_eq!(
        txn_version(encoded.as_bytes(), "q-1", "c").unwrap(),
        Some(9)
    );
    assert_eq!(txn_version(encoded.as_bytes(), "q-2", "c").unwrap(), None);
}

#[test]
fn a_commit_of_another_writer_is_read_and_a_damaged_one_is_named() {
    // Spark's and delta-rs's commits: other actions, other apps' txns.
    let theirs = concat!(
        r#"{"commitInfo":{"timestamp":1,"operation":"WRITE"}}"#,
        "\n",
        r#"{"txn":{"appId":"spark-stream","version":30}}"#,
        "\n",
        r#"{"remove":{"path":"x.parquet","dataChange":true}}"#,
        "\n",
        r#"{"txn":{"appId":"q-1","version":3,"lastUpdated":9}}"#,
        "\n"
    );
    assert_eq!(txn_version(theirs.as_bytes(), "q-1", "c").unwrap(), Some(3));
    assert_eq!(txn_version(b"", "q-1", "c").unwrap(), None);
    let err = txn_version(
        b"{\"add\":\n",
        "q-1",
        "_delta_log/00000000000000000004.json",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("00000000000000000004.json") && err.contains("line 1"),
        "{err}"
    );
    let twice = concat!(
        r#"{"txn":{"appId":"q-1","version":3}}"#,
        "\n",
        r#"{"txn":{"appId":"q-1","version":4}}"#
    );
    assert!(txn_version(twice.as_bytes(), "q-1", "c").is_err());
}
