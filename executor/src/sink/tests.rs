use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use sluice_proto::SinkFormat;

use super::hive::{self, escape};
use super::parts::{Layout, Parts, Piece};

fn batch() -> RecordBatch {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5])),
            Arc::new(StringArray::from(vec![
                Some("Lyon"),
                Some("a/b:c"),
                None,
                Some("Lyon"),
                Some(""),
            ])),
        ],
    )
    .unwrap()
}

#[test]
fn rows_go_to_hive_directories_in_order_of_first_appearance() {
    let b = batch();
    let (cols, data) = hive::layout(&b.schema(), &["city".to_string()]).unwrap();
    assert_eq!(cols, vec![1]);
    assert_eq!(data.fields().len(), 1);
    let groups = hive::split(&b, &cols, &data).unwrap();
    let dirs: Vec<(&str, usize)> = groups
        .iter()
        .map(|(d, b)| (d.as_str(), b.num_rows()))
        .collect();
    assert_eq!(
        dirs,
        vec![
            ("city=Lyon", 2),
            ("city=a%2Fb%3Ac", 1),
            ("city=__HIVE_DEFAULT_PARTITION__", 2),
        ]
    );
    let ids = groups[0]
        .1
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.values(), &[1, 4]);
    assert_eq!(escape("x=1%"), "x%3D1%25");
    assert!(hive::layout(&b.schema(), &["nope".to_string()]).is_err());
}

fn pieces(format: SinkFormat, partition_by: &[&str], max_file_bytes: u64) -> Vec<Piece> {
    let b = batch();
    let layout = Layout {
        format,
        partition_by: partition_by.iter().map(|s| s.to_string()).collect(),
        max_file_bytes,
        batch: 7,
        partition: 2,
        tag: String::new(),
    };
    let mut parts = Parts::new(layout, &b.schema()).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        parts.write(&b, &mut out).unwrap();
    }
    parts.finish(&mut out).unwrap();
    out
}

/// (name, rows, bytes) of every file, in the order they end.
fn files(pieces: &[Piece]) -> Vec<(String, u64, usize)> {
    let mut out = Vec::new();
    for p in pieces {
        if let Piece::End { name, rows } = p {
            let bytes = pieces
                .iter()
                .map(|q| match q {
                    Piece::Data { name: n, bytes } if n == name => bytes.len(),
                    _ => 0,
                })
                .sum();
            out.push((name.to_string(), *rows, bytes));
        }
    }
    out
}

#[test]
fn a_file_that_reaches_the_size_limit_is_ended_and_the_next_is_numbered() {
    let one = files(&pieces(SinkFormat::Csv, &[], u64::MAX));
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].0, "part-00000000000000000007-00002.csv");
    assert_eq!(one[0].1, 15);
    // A limit below one batch's bytes: a file per batch.
    let cut = files(&pieces(SinkFormat::Csv, &[], 10));
    let names: Vec<&str> = cut.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "part-00000000000000000007-00002.csv",
            "part-00000000000000000007-00002-0001.csv",
            "part-00000000000000000007-00002-0002.csv",
        ]
    );
    assert!(cut.iter().all(|f| f.1 == 5));
    // Each csv file has its own header.
    let text = |ps: &[Piece], name: &str| -> String {
        ps.iter()
            .filter_map(|p| match p {
                Piece::Data { name: n, bytes } if n.as_ref() == name => {
                    Some(String::from_utf8(bytes.to_vec()).unwrap())
                }
                _ => None,
            })
            .collect()
    };
    let ps = pieces(SinkFormat::Csv, &[], 10);
    assert!(text(&ps, names[1]).starts_with("id,city\n"));
}

#[test]
fn partitioned_output_has_a_file_per_directory_and_the_bytes_repeat() {
    let ps = pieces(SinkFormat::Parquet, &["city"], u64::MAX);
    let f = files(&ps);
    let names: Vec<&str> = f.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "city=Lyon/part-00000000000000000007-00002.parquet",
            "city=__HIVE_DEFAULT_PARTITION__/part-00000000000000000007-00002.parquet",
            "city=a%2Fb%3Ac/part-00000000000000000007-00002.parquet",
        ]
    );
    assert_eq!(f.iter().map(|f| f.1).collect::<Vec<_>>(), vec![6, 6, 3]);
    // A retried task encodes the same bytes.
    let again = files(&pieces(SinkFormat::Parquet, &["city"], u64::MAX));
    assert_eq!(f, again);
}
