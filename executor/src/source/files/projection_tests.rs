//! A file source reads only the columns a query reads: a Parquet file's
//! other column chunks are never fetched, and a line's other fields are
//! not decoded.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::source::{Columns, ReadCounters, SourceReader};

/// Nexmark's bid: 7 columns, 4 of them strings.
fn bids() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("bidder", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new("channel", DataType::Utf8, false),
        Field::new("url", DataType::Utf8, false),
        Field::new("date_time", DataType::Int64, false),
        Field::new("extra", DataType::Utf8, false),
    ]))
}

const ROWS: i64 = 20_000;

fn batch() -> RecordBatch {
    let ints = |f: fn(i64) -> i64| Arc::new(Int64Array::from_iter_values((0..ROWS).map(f)));
    let strings = |p: &'static str, len: usize| {
        let s = (0..ROWS).map(move |i| format!("{p}{i}{}", "x".repeat(len)));
        Arc::new(StringArray::from_iter_values(s))
    };
    RecordBatch::try_new(
        bids(),
        vec![
            ints(|i| i % 1000),
            ints(|i| i * 7),
            ints(|i| i * 3 + 1),
            strings("c", 10),
            strings("https://example.com/", 40),
            ints(|i| 1_700_000_000_000 + i),
            strings("e", 80),
        ],
    )
    .unwrap()
}

/// A Parquet file of [`batch`] in row groups of 4096 rows; its size.
fn write_parquet(path: &std::path::Path) -> u64 {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(4096))
        .build();
    let mut w = ArrowWriter::try_new(Vec::new(), bids(), Some(props)).unwrap();
    w.write(&batch()).unwrap();
    let bytes = w.into_inner().unwrap();
    std::fs::write(path, &bytes).unwrap();
    bytes.len() as u64
}

/// The reader of all of `file` (of `size` bytes, in `format`) in `dir`.
fn reader(dir: &std::path::Path, file: &str, size: u64, format: &str) -> Box<dyn SourceReader> {
    let task = sluice_proto::FilesTask {
        root: dir.display().to_string(),
        format: format.into(),
        ranges: vec![sluice_proto::FileRange {
            path: file.into(),
            size,
            start: 0,
            end: size,
            modified_ms: 0,
        }],
        skip_bad_records: false,
        csv: None,
        label: String::new(),
    };
    Box::new(super::FilesReader::new(task, bids(), Default::default()).unwrap())
}

/// Reads all of `file` (of `size` bytes, in `format`) for `columns`: the
/// batches and the bytes fetched.
async fn read(
    dir: &std::path::Path,
    file: &str,
    size: u64,
    format: &str,
    columns: &[usize],
) -> (Vec<RecordBatch>, u64) {
    let reader = reader(dir, file, size, format);
    let counters = ReadCounters::default();
    let columns = Columns::of(&bids(), columns, None);
    let batches = reader
        .read(columns, counters.clone())
        .try_collect()
        .await
        .unwrap();
    (batches, counters.bytes_read.get())
}

fn column_values(batches: &[RecordBatch], name: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(name).unwrap();
            let c = c.as_any().downcast_ref::<Int64Array>().unwrap();
            c.values().to_vec()
        })
        .collect()
}

#[tokio::test]
async fn a_parquet_read_of_two_columns_fetches_only_their_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let size = write_parquet(&dir.path().join("bids.parquet"));
    let meta = {
        let file = std::fs::File::open(dir.path().join("bids.parquet")).unwrap();
        parquet::file::reader::SerializedFileReader::new(file).unwrap()
    };
    use parquet::file::reader::FileReader;
    let groups = meta.metadata().row_groups();
    assert!(groups.len() > 3, "the file has several row groups");
    let chunks = |c: usize| -> u64 { groups.iter().map(|g| g.column(c).byte_range().1).sum() };

    let (batches, fetched) = read(dir.path(), "bids.parquet", size, "parquet", &[0, 2]).await;
    let names: Vec<String> = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["auction", "price"]);
    let all = batch();
    for name in ["auction", "price"] {
        let same = column_values(&batches, name) == column_values(std::slice::from_ref(&all), name);
        assert!(same, "{name} as written");
    }
    // Exactly the two columns' chunks, nothing of the other five.
    assert_eq!(fetched, chunks(0) + chunks(2));

    let (_, every) = read(
        dir.path(),
        "bids.parquet",
        size,
        "parquet",
        &[0, 1, 2, 3, 4, 5, 6],
    )
    .await;
    assert_eq!(every, (0..7).map(chunks).sum::<u64>());
    assert!(fetched * 5 < every, "{fetched} of {every} bytes");
}

#[tokio::test]
async fn jsonl_and_csv_reads_decode_only_the_columns_read() {
    let dir = tempfile::tempdir().unwrap();
    let all = batch();
    // A value of an unread column that is not of its type: not checked.
    let mut jsonl = String::from(
        "{\"auction\": 5, \"bidder\": \"not a number\", \"price\": 9, \"channel\": \"c\", \
         \"url\": \"u\", \"date_time\": 1, \"extra\": \"e\"}\n",
    );
    let mut csv = String::from("auction,bidder,price,channel,url,date_time,extra\n");
    csv.push_str("5,not a number,9,c,u,1,e\n");
    for i in 0..all.num_rows() {
        let text = |c: usize| arrow_cast::display::array_value_to_string(all.column(c), i).unwrap();
        jsonl.push_str(&format!(
            "{{\"auction\": {}, \"bidder\": {}, \"price\": {}, \"channel\": {:?}, \"url\": {:?}, \
             \"date_time\": {}, \"extra\": {:?}}}\n",
            text(0),
            text(1),
            text(2),
            text(3),
            text(4),
            text(5),
            text(6)
        ));
        let row: Vec<String> = (0..7).map(text).collect();
        csv.push_str(&row.join(","));
        csv.push('\n');
    }
    for (file, format, body) in [("b.jsonl", "jsonl", jsonl), ("b.csv", "csv", csv)] {
        std::fs::write(dir.path().join(file), &body).unwrap();
        let size = body.len() as u64;
        let (batches, fetched) = read(dir.path(), file, size, format, &[0, 2]).await;
        assert_eq!(batches[0].num_columns(), 2, "{format}");
        let mut want = vec![5];
        want.extend(column_values(std::slice::from_ref(&all), "auction"));
        let got = column_values(&batches, "auction");
        assert!(
            got == want,
            "{format}: {} rows, from {:?}",
            got.len(),
            &got[..3]
        );
        assert_eq!(column_values(&batches, "price")[0], 9, "{format}");
        assert_eq!(fetched, size, "{format}: lines are read whole");
    }
}

#[tokio::test]
async fn a_parquet_read_applies_the_query_filter_and_counts_the_rows_it_drops() {
    let dir = tempfile::tempdir().unwrap();
    let size = write_parquet(&dir.path().join("bids.parquet"));
    let mut reader = reader(dir.path(), "bids.parquet", size, "parquet");
    let counters = ReadCounters::default();
    let (seen, passed) = (counters.clone(), crate::counter::Counter::default());
    let passed_on = passed.clone();
    let input = sluice_sql::TaskInput::filtered(move |wanted, filter| {
        reader.filter(filter.expect("the query's filter"));
        let columns = Columns::of(&bids(), wanted, None);
        let batches = reader.read(columns, counters).map(move |b| {
            let b = b?;
            passed_on.add(b.num_rows() as u64);
            Ok(b)
        });
        Box::pin(batches.map_err(|e: crate::error::ExecutorError| e.to_string().into()))
    });
    let sql = "SELECT auction, price FROM input WHERE auction % 123 = 0";
    let budget = sluice_sql::guard::DEFAULT_BUDGET;
    let mut out = sluice_sql::run(sql, bids(), input, &[], budget)
        .await
        .unwrap();
    let mut batches = Vec::new();
    while let Some(b) = out.next().await {
        batches.push(b.unwrap());
    }
    out.read_rest().await.unwrap();
    let want: Vec<i64> = (0..ROWS)
        .map(|i| i % 1000)
        .filter(|a| a % 123 == 0)
        .collect();
    assert_eq!(column_values(&batches, "auction"), want);
    // The reader passed on only the rows kept; with those it dropped, every row.
    assert_eq!(passed.get(), want.len() as u64);
    assert_eq!(seen.rows_filtered.get() + passed.get(), ROWS as u64);
}
