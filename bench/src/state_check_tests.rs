use super::*;
use std::collections::HashMap;

use sluice_common::sink::FileSink;

/// A sink in a temp dir with one batch per entry of `batches`, each one
/// part file of those JSON rows.
async fn sink_of(batches: &[Vec<Value>]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let sink = FileSink::open(&sluice_cli::verify::stores(), &path).unwrap();
    for (b, rows) in batches.iter().enumerate() {
        let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
        let f = sink
            .write_part(b as u64, 0, rows.len() as u64, text.into_bytes())
            .await
            .unwrap();
        let manifest = FileSink::manifest(b as u64, 1, vec![f]);
        sink.write_manifest(&manifest).await.unwrap();
    }
    (dir, path)
}

/// Counts from `check_latest` over `batches`, expecting `n` = 2 for key
/// 0 and 1 for key 1.
async fn latest(batches: &[Vec<Value>]) -> Value {
    let (_dir, path) = sink_of(batches).await;
    let expected = |k: u64| vec![if k == 0 { 2 } else { 1 }];
    let (check, exact) = check_latest(&path, 2, &["n"], expected).await.unwrap();
    assert_eq!(check["exact"], exact);
    check
}

#[tokio::test]
async fn the_last_row_of_each_key_counts() {
    let first = vec![json!({"k": 0, "n": 1}), json!({"k": 1, "n": 1})];
    let check = latest(&[first.clone(), vec![json!({"k": 0, "n": 2})]]).await;
    assert_eq!(check["exact"], true, "{check}");
    assert_eq!(
        (check["rows"].as_u64(), check["committed_batches"].as_u64()),
        (Some(3), Some(2))
    );
    // An older total last, a key never emitted, a key twice in a batch, a
    // key out of range.
    let check = latest(&[
        vec![json!({"k": 0, "n": 2}), json!({"k": 1, "n": 1})],
        first.clone(),
    ])
    .await;
    assert_eq!(
        (check["wrong"].as_u64(), check["exact"].as_bool()),
        (Some(1), Some(false))
    );
    let check = latest(&[vec![json!({"k": 0, "n": 2})]]).await;
    assert_eq!(check["missing_keys"], 1);
    let twice = vec![
        json!({"k": 0, "n": 2}),
        json!({"k": 0, "n": 2}),
        json!({"k": 1, "n": 1}),
    ];
    let check = latest(&[twice]).await;
    assert_eq!(
        (check["twice_in_a_batch"].as_u64(), check["exact"].as_bool()),
        (Some(1), Some(false))
    );
    let mut extra = first;
    extra.push(json!({"k": 7, "n": 1}));
    let check = latest(&[extra, vec![json!({"k": 0, "n": 2})]]).await;
    assert_eq!(
        (check["unexpected"].as_u64(), check["exact"].as_bool()),
        (Some(1), Some(false))
    );
}

/// One value per millisecond from 0, two keys, windows of a second: each
/// (window, key) of a full window holds 500 values.
fn per_ms() -> Windows {
    Windows {
        start_ms: 0,
        rows_per_second: 1000,
        rows: 3000,
        keys: 2,
        size_ms: 1000,
    }
}

fn window_row(start: i64, k: u64, n: u64) -> Value {
    json!({"w": {"start": start, "end": start + 1000}, "k": k, "n": n})
}

async fn windows(batches: &[Vec<Value>], watermark: Option<i64>) -> Value {
    let (_dir, path) = sink_of(batches).await;
    let (check, exact) = per_ms().check(&path, watermark).await.unwrap();
    assert_eq!(check["exact"], exact);
    check
}

#[tokio::test]
async fn each_closed_window_once_with_its_count() {
    let text = json!({"w": {"start": "1970-01-01T00:00:01", "end": "1970-01-01T00:00:02"}, "k": 1, "n": 500});
    let both = vec![window_row(0, 0, 500), window_row(0, 1, 500)];
    let check = windows(
        &[both.clone(), vec![window_row(1000, 0, 500), text]],
        Some(2000),
    )
    .await;
    assert_eq!(check["exact"], true, "{check}");
    assert_eq!(
        (
            check["windows_emitted"].as_u64(),
            check["expected_pairs"].as_u64()
        ),
        (Some(2), Some(4))
    );
    // A window the watermark passed but not emitted, one emitted early, a
    // wrong count, a duplicate.
    let check = windows(std::slice::from_ref(&both), Some(2000)).await;
    assert_eq!(
        (check["missing"].as_u64(), check["exact"].as_bool()),
        (Some(2), Some(false))
    );
    let check = windows(std::slice::from_ref(&both), Some(999)).await;
    assert_eq!(
        (check["premature"].as_u64(), check["exact"].as_bool()),
        (Some(2), Some(false))
    );
    let check = windows(
        &[vec![window_row(0, 0, 499), window_row(0, 1, 500)]],
        Some(1000),
    )
    .await;
    assert_eq!(
        (check["wrong"].as_u64(), check["missing"].as_u64()),
        (Some(1), Some(1))
    );
    let check = windows(&[both.clone(), vec![window_row(0, 1, 500)]], Some(1000)).await;
    assert_eq!(
        (check["duplicated"].as_u64(), check["exact"].as_bool()),
        (Some(1), Some(false))
    );
    let check = windows(&[both], Some(1000)).await;
    assert_eq!(check["exact"], true, "{check}");
}

#[test]
fn sink_timestamps_in_both_forms() {
    assert_eq!(millis(&json!(1234)), Some(1234));
    assert_eq!(millis(&json!("1970-01-01T00:00:00")), Some(0));
    assert_eq!(
        millis(&json!("2000-03-01T00:00:01.5")),
        Some(951_868_801_500)
    );
    assert_eq!(
        millis(&json!("2024-02-29 12:34:56.789Z")),
        Some(1_709_210_096_789)
    );
    assert_eq!(millis(&json!("1969-12-31T23:59:59")), Some(-1000));
    assert_eq!(millis(&json!("not a time")), None);
    assert_eq!(millis(&Value::Null), None);
}

#[test]
fn window_counts_match_the_rate_source() {
    let w = Windows {
        start_ms: 1_700_000_000_123,
        rows_per_second: 7,
        rows: 1000,
        keys: 13,
        size_ms: 10_000,
    };
    let mut counts: HashMap<(i64, u64), u64> = HashMap::new();
    for v in 0..w.rows {
        let ts = sluice_common::rate::timestamp_ms(w.start_ms, v, w.rows_per_second);
        *counts
            .entry((ts - ts.rem_euclid(w.size_ms), v % w.keys))
            .or_default() += 1;
    }
    let starts: BTreeSet<i64> = counts.keys().map(|(s, _)| *s).collect();
    for &s in &starts {
        for k in 0..w.keys {
            assert_eq!(w.count(s, k), counts.get(&(s, k)).copied().unwrap_or(0));
        }
    }
    let last = *starts.last().unwrap();
    let all = w.closed(Some(last + w.size_ms));
    assert_eq!(all, (starts.len() as u64, counts.len() as u64));
    let (windows, pairs) = w.closed(Some(last + w.size_ms - 1));
    assert_eq!(windows, starts.len() as u64 - 1);
    let open = counts.keys().filter(|(s, _)| *s == last).count() as u64;
    assert_eq!(pairs, counts.len() as u64 - open);
    assert_eq!(w.closed(None), (0, 0));
}

#[test]
fn counts_below() {
    assert_eq!(count_below(2500, 1000, 499), 3);
    assert_eq!(count_below(2500, 1000, 500), 2);
    assert_eq!(count_below(0, 7, 0), 0);
}
