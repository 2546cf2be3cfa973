use std::sync::Arc;

use arrow_array::{Array, Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema};
use sluice_common::spec::{CsvOptions, Format};

use super::lines::{Decoded, LineFormat, RangeLines};

/// The lines of `file` that a range `[start, end)` holds, found as the
/// reader finds them: pushed in chunks of `chunk` bytes.
fn range_lines(file: &[u8], start: u64, end: u64, chunk: usize) -> Vec<String> {
    let mut lines = RangeLines::new(start, end);
    let mut at = lines.read_from() as usize;
    let mut got = Vec::new();
    while !lines.is_done() {
        let to = file.len().min(at + chunk);
        let n = lines.push(&file[at..to], to == file.len());
        got.extend(
            String::from_utf8(lines.body()[..n].to_vec())
                .unwrap()
                .lines()
                .map(str::to_string),
        );
        lines.consume(n);
        at = to;
    }
    got
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
        for chunk in 1..=file.len() + 1 {
            let mut got = Vec::new();
            let mut start = 0;
            while start < size {
                let end = size.min(start + step);
                got.extend(range_lines(file, start, end, chunk));
                start = end;
            }
            assert_eq!(got, all, "ranges of {step} bytes, read {chunk} at a time");
        }
    }
}

#[test]
fn a_range_stops_at_its_last_line_and_keeps_only_a_cut_line() {
    let file = b"aa\nbb\ncc\ndd\n";
    // [3, 7): bb\n and cc\n start in it, dd\n in the next range.
    let mut lines = RangeLines::new(3, 7);
    assert_eq!(lines.read_from(), 2);
    assert_eq!(lines.push(&file[2..5], false), 0, "no whole line yet");
    assert_eq!(lines.body(), b"bb", "only the cut line is kept");
    let n = lines.push(&file[5..], true);
    assert_eq!(&lines.body()[..n], b"bb\ncc\n");
    assert!(lines.is_done(), "dd starts after the range");
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

/// The batches of `ranges` of jsonl files under `dir`, read as a task
/// reads them.
fn read_jsonl(
    dir: &std::path::Path,
    ranges: Vec<sluice_proto::FileRange>,
    skip_bad: bool,
    label: &str,
) -> crate::source::Batches {
    let task = sluice_proto::FilesTask {
        root: dir.display().to_string(),
        format: "jsonl".into(),
        ranges,
        skip_bad_records: skip_bad,
        csv: None,
        label: label.into(),
    };
    let schema = fmt(Format::Jsonl, skip_bad).schema;
    let reader = super::FilesReader::new(task, schema, Default::default()).unwrap();
    let reader: Box<dyn crate::source::SourceReader> = Box::new(reader);
    let columns = crate::source::Columns::all(&reader.schema());
    reader.read(columns, crate::source::ReadCounters::default())
}

/// The ids read from `ranges` of `dir` as a task would, or its error.
async fn read_ids(
    dir: &std::path::Path,
    ranges: Vec<sluice_proto::FileRange>,
    skip_bad: bool,
) -> Result<Vec<i64>, String> {
    use futures::StreamExt;
    let mut batches = read_jsonl(dir, ranges, skip_bad, "");
    let mut out = Vec::new();
    while let Some(b) = batches.next().await {
        let b = b.map_err(|e| e.to_string())?;
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        out.extend(col.iter().map(|v| v.unwrap_or(-1)));
    }
    Ok(out)
}

#[tokio::test]
async fn ranges_larger_than_a_chunk_read_every_line_once_and_name_a_bad_line() {
    // About 3 chunks of lines, cut into ranges at odd places (and one
    // range inside a single line), then with a bad line past the first
    // chunk.
    let dir = tempfile::tempdir().unwrap();
    let line = |i: usize| format!("{{\"id\": {i}, \"city\": \"{}\"}}\n", "c".repeat(i % 50));
    let rows = 300_000;
    let body: String = (0..rows).map(line).collect();
    std::fs::write(dir.path().join("a.jsonl"), &body).unwrap();
    let size = body.len() as u64;
    let cuts = [0, 1, 5_000_000, 5_000_003, 9_999_999, size];
    let ranges: Vec<_> = cuts
        .windows(2)
        .map(|w| sluice_proto::FileRange {
            path: "a.jsonl".into(),
            size,
            start: w[0],
            end: w[1],
            modified_ms: 0,
        })
        .collect();
    let ids = read_ids(dir.path(), ranges.clone(), false).await.unwrap();
    assert_eq!(ids, (0..rows as i64).collect::<Vec<_>>());

    let bad_at = 200_000;
    let body = body.replacen(&line(bad_at), "{\"id\": oops}\n", 1);
    std::fs::write(dir.path().join("a.jsonl"), &body).unwrap();
    let size = body.len() as u64;
    let whole = sluice_proto::FileRange {
        path: "a.jsonl".into(),
        size,
        start: 0,
        end: size,
        modified_ms: 0,
    };
    let err = read_ids(dir.path(), vec![whole.clone()], false)
        .await
        .unwrap_err();
    assert!(err.contains(&format!("line {}:", bad_at + 1)), "{err}");
    let ids = read_ids(dir.path(), vec![whole], true).await.unwrap();
    assert_eq!(ids.len(), rows - 1, "only the bad line is skipped");
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
    let mut batches = read_jsonl(dir, ranges, true, label);
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
