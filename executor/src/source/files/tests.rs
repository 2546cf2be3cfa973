use std::sync::Arc;

use arrow_array::{Array, Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema};
use sluice_common::spec::{CsvOptions, Format};

use super::lines::{Decoded, LineFormat, first_line, line_end};

/// The lines of `file` that a range `[start, end)` holds, found as the
/// reader finds them.
fn range_lines(file: &[u8], start: u64, end: u64) -> Vec<String> {
    let from = start.saturating_sub(1);
    let buf = &file[from as usize..];
    let Some(first) = first_line(buf, from, start) else {
        return Vec::new();
    };
    if first as u64 + from >= end {
        return Vec::new();
    }
    let last = line_end(buf, from, end).unwrap_or(buf.len());
    String::from_utf8(buf[first..last].to_vec())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn byte_ranges_hold_every_line_exactly_once() {
    let file = b"a\nbb\n\nccc\ndddd\ne";
    let all: Vec<String> = String::from_utf8(file.to_vec())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let size = file.len() as u64;
    for step in 1..=size {
        let mut got = Vec::new();
        let mut start = 0;
        while start < size {
            let end = size.min(start + step);
            got.extend(range_lines(file, start, end));
            start = end;
        }
        assert_eq!(got, all, "ranges of {step} bytes");
    }
}

fn fmt(format: Format, skip_bad: bool) -> LineFormat {
    LineFormat {
        format,
        schema: Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("city", DataType::Utf8, true),
        ])),
        columns: None,
        csv: CsvOptions::default(),
        skip_bad,
    }
}

fn ids(d: &mut Decoded<'_>) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    while let Some(b) = d.next_batch() {
        let b = b.map_err(|e| format!("line {}: {}", e.index, e.reason))?;
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        out.extend(col.iter().map(|v| v.unwrap_or(-1)));
        let cities = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(cities.len(), col.len());
    }
    Ok(out)
}

#[test]
fn a_bad_jsonl_line_fails_with_its_index_or_is_skipped_and_counted() {
    let body = b"{\"id\": 1, \"city\": \"a\"}\n{\"id\": \"x\"}\n\n{\"id\": 3}\nnot json\n";
    let f = fmt(Format::Jsonl, false);
    let err = ids(&mut Decoded::new(&f, body)).unwrap_err();
    assert!(err.starts_with("line 1:"), "{err}");
    let f = fmt(Format::Jsonl, true);
    let mut d = Decoded::new(&f, body);
    assert_eq!(ids(&mut d).unwrap(), vec![1, 3]);
    assert_eq!(d.bad, 2);
}

#[test]
fn csv_skips_its_header_and_bad_rows_are_found() {
    let body = b"id,city\n1,a\n2,b,extra\n3,c\n";
    let f = fmt(Format::Csv, true);
    let mut d = Decoded::new(&f, body).skip_header();
    assert_eq!(ids(&mut d).unwrap(), vec![1, 3]);
    assert_eq!(d.bad, 1);
    let f = fmt(Format::Csv, false);
    let err = ids(&mut Decoded::new(&f, body).skip_header()).unwrap_err();
    assert!(err.starts_with("line 2:"), "{err}");
}

#[test]
fn large_inputs_decode_in_groups_with_every_row() {
    let body: String = (0..20_000).map(|i| format!("{{\"id\": {i}}}\n")).collect();
    let f = fmt(Format::Jsonl, false);
    let got = ids(&mut Decoded::new(&f, body.as_bytes())).unwrap();
    assert_eq!(got, (0..20_000).collect::<Vec<i64>>());
}

#[test]
fn lines_read_in_place_or_copied_decode_alike() {
    // Groups with a blank line or a last line without its newline are
    // copied; the others are read where they lie.
    let mut body: String = (0..9_000).map(|i| format!("{{\"id\": {i}}}\n")).collect();
    let middle = body[body.len() / 2..].find('\n').unwrap() + body.len() / 2 + 1;
    body.insert_str(middle, "\n  \n");
    body.push_str("{\"id\": 9000}");
    for f in [fmt(Format::Jsonl, false), fmt(Format::Jsonl, true)] {
        let mut d = Decoded::new(&f, body.as_bytes());
        assert_eq!(ids(&mut d).unwrap(), (0..=9_000).collect::<Vec<i64>>());
        assert_eq!(d.bad, 0);
    }
    let csv: String = (0..9_000).map(|i| format!("{i},c{i}\n")).collect();
    let f = fmt(Format::Csv, false);
    let got = ids(&mut Decoded::new(&f, csv.as_bytes())).unwrap();
    assert_eq!(got, (0..9_000).collect::<Vec<i64>>());
}

/// The first error of reading `ranges` of `dir`, as a task would.
async fn read_error(dir: &std::path::Path, ranges: Vec<sluice_proto::FileRange>) -> String {
    read_error_as(dir, ranges, "").await
}

async fn read_error_as(
    dir: &std::path::Path,
    ranges: Vec<sluice_proto::FileRange>,
    label: &str,
) -> String {
    use futures::StreamExt;
    let task = sluice_proto::FilesTask {
        root: dir.display().to_string(),
        format: "jsonl".into(),
        ranges,
        skip_bad_records: true,
        csv: None,
        label: label.into(),
    };
    let reader =
        super::FilesReader::new(task, fmt(Format::Jsonl, true).schema, Default::default()).unwrap();
    let reader: Box<dyn crate::source::SourceReader> = Box::new(reader);
    let columns = crate::source::Columns::all(&reader.schema());
    let mut batches = reader.read(columns, crate::source::ReadCounters::default());
    while let Some(b) = batches.next().await {
        if let Err(e) = b {
            assert!(!e.is_retryable(), "{e}");
            return e.to_string();
        }
    }
    panic!("the read succeeded")
}

#[tokio::test]
async fn a_file_that_changed_or_vanished_since_planning_fails_for_good() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    let range = |path: &str, size| sluice_proto::FileRange {
        path: path.into(),
        size,
        start: 0,
        end: size,
        modified_ms: 0,
    };
    let err = read_error(dir.path(), vec![range("a.jsonl", 10)]).await;
    assert!(
        err.contains("a.jsonl changed size after the batch was planned: 10 bytes then, 20 now"),
        "{err}"
    );
    let err = read_error(
        dir.path(),
        vec![range("a.jsonl", 20), range("gone.jsonl", 5)],
    )
    .await;
    assert!(
        err.contains("gone.jsonl vanished after the batch was planned"),
        "{err}"
    );
}

#[tokio::test]
async fn a_static_table_file_modified_since_planning_fails_naming_the_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.jsonl"), "{\"id\": 1}\n").unwrap();
    let range = sluice_proto::FileRange {
        path: "c.jsonl".into(),
        size: 10,
        start: 0,
        end: 10,
        modified_ms: 1_000,
    };
    let err = read_error_as(dir.path(), vec![range], "static table cities file").await;
    assert!(err.contains("static table cities file"), "{err}");
    assert!(
        err.contains("c.jsonl changed after the batch was planned: modified at 1000 ms then"),
        "{err}"
    );
}
