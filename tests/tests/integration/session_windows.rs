//! Session windows through a real cluster, batch by batch: a row that
//! bridges two sessions of earlier batches merges them; a session whose end
//! is the watermark is not final yet (a row at the watermark is on time
//! and extends it); in append mode each session comes once, final, and in
//! update mode each batch emits the sessions it changed, whose maximal
//! intervals are the sessions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use sluice_tests::inputs;
use sluice_tests::stateful::batches;
use sluice_tests::{Cluster, QueryState};

const T: i64 = 1_700_000_000_000;

const SQL: &str = "SELECT city, count(*) AS n, session_window(ts, '10 seconds')['start'] AS s, \
    session_window(ts, '10 seconds')['end'] AS e FROM input \
    GROUP BY city, session_window(ts, '10 seconds')";

/// One file a batch: each row's city and event time in seconds after `T`.
/// With a gap of 10 s and a watermark 15 s behind: batch 1 bridges Lyon's
/// two sessions of batch 0; batch 3's watermark is 35 s, the end of
/// Oslo's session, which its row at 35 s extends; Lyon's ends before it.
const FILES: [&[(&str, i64)]; 5] = [
    &[("Lyon", 0), ("Lyon", 20)],
    &[("Lyon", 10), ("Oslo", 25)],
    &[("Kyiv", 50)],
    &[("Oslo", 35)],
    &[("Pune", 60)],
];

fn file(rows: &[(&str, i64)]) -> RecordBatch {
    let n = rows.len();
    let ts: TimestampMillisecondArray = rows.iter().map(|(_, s)| Some(T + s * 1000)).collect();
    let city: StringArray = rows.iter().map(|(c, _)| Some(*c)).collect();
    RecordBatch::try_new(
        inputs::schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
            Arc::new(ts),
            Arc::new(city),
            Arc::new(StringArray::from(vec![Some("t"); n])),
            Arc::new(Float64Array::from(vec![0.0; n])),
        ],
    )
    .expect("rows fit the schema")
}

/// A row of the sink: (city, n, start, end), times in seconds after `T`.
fn session(row: &str) -> (String, i64, i64, i64) {
    let v: serde_json::Value = serde_json::from_str(row).expect("a JSON row");
    // Normalized rows hold every value as a string.
    let int = |f: &str| -> i64 { v[f].as_str().and_then(|x| x.parse().ok()).expect(f) };
    let secs = |f: &str| (int(f) - T) / 1000;
    let city = v["city"].as_str().expect("a city").to_string();
    (city, int("n"), secs("s"), secs("e"))
}

fn sessions(rows: &[String]) -> Vec<(String, i64, i64, i64)> {
    let mut out: Vec<_> = rows.iter().map(|r| session(r)).collect();
    out.sort();
    out
}

fn s(city: &str, n: i64, start: i64, end: i64) -> (String, i64, i64, i64) {
    (city.to_string(), n, start, end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_merge_across_batches_and_close_after_the_watermark_passes_their_end() {
    let cluster = Cluster::new("sessions");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let dir = cluster.root().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, rows) in FILES.iter().enumerate() {
        inputs::write(&dir, &format!("f-{i}.csv"), "csv", &file(rows));
    }
    for mode in ["append", "update"] {
        let spec = inputs::spec(
            mode,
            &dir,
            "csv",
            &cluster.sink_path(mode),
            SQL,
            FILES.len() as u64,
        )
        .replace("max_files_per_batch: 2", "max_files_per_batch: 1")
            + &format!(
                "watermark: {{column: ts, delay_ms: 15000}}\noutput_mode: {mode}\nstate_partitions: 2\n"
            );
        client.submit(&spec).await.expect("submit");
    }
    let finals = vec![
        s("Kyiv", 1, 50, 60),
        s("Lyon", 3, 0, 30),
        s("Oslo", 2, 25, 45),
        s("Pune", 1, 60, 70),
    ];

    client
        .wait_state("append", QueryState::Finished, Duration::from_secs(60))
        .await;
    let progress = client.progress("append").await.unwrap();
    let marks: Vec<Option<i64>> = progress
        .iter()
        .map(|p| p.watermark_ms.map(|w| (w - T) / 1000))
        .collect();
    assert_eq!(
        &marks[1..5],
        [Some(5), Some(10), Some(35), Some(35)],
        "{progress:#?}"
    );
    assert!(progress.iter().all(|p| p.rows_dropped_by_watermark == 0));
    let by_batch: BTreeMap<u64, Vec<_>> = batches(&cluster.sink_path("append"))
        .await
        .into_iter()
        .map(|(id, rows)| (id, sessions(&rows)))
        .filter(|(_, rows)| !rows.is_empty())
        .collect();
    let want: BTreeMap<u64, Vec<_>> = [
        // Lyon's session ends at 30 s, before batch 3's watermark; Oslo's
        // ends at it, and grows.
        (3, vec![s("Lyon", 3, 0, 30)]),
        // The end of input closes the rest.
        (
            5,
            vec![
                s("Kyiv", 1, 50, 60),
                s("Oslo", 2, 25, 45),
                s("Pune", 1, 60, 70),
            ],
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_batch, want, "append: each session once, when final");

    client
        .wait_state("update", QueryState::Finished, Duration::from_secs(60))
        .await;
    let by_batch = batches(&cluster.sink_path("update")).await;
    let emitted: BTreeMap<u64, Vec<_>> = by_batch
        .iter()
        .map(|(id, rows)| (*id, sessions(rows)))
        .filter(|(_, rows)| !rows.is_empty())
        .collect();
    let want: BTreeMap<u64, Vec<_>> = [
        (0, vec![s("Lyon", 1, 0, 10), s("Lyon", 1, 20, 30)]),
        (1, vec![s("Lyon", 3, 0, 30), s("Oslo", 1, 25, 35)]),
        (2, vec![s("Kyiv", 1, 50, 60)]),
        (3, vec![s("Oslo", 2, 25, 45)]),
        (4, vec![s("Pune", 1, 60, 70)]),
    ]
    .into_iter()
    .collect();
    assert_eq!(emitted, want, "update: each batch's changed sessions");
    // A consumer's view: of each city's rows, the latest of each maximal
    // interval (an interval inside another was merged into it).
    let all: Vec<_> = emitted.into_values().flatten().collect();
    let mut current: Vec<_> = all
        .iter()
        .filter(|(c, _, a, b)| {
            !all.iter()
                .any(|(c2, _, a2, b2)| c == c2 && a2 <= a && b <= b2 && (a2, b2) != (a, b))
        })
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    current.dedup_by(|x, y| (&x.0, x.2, x.3) == (&y.0, y.2, y.3));
    assert_eq!(current, finals);
}
