//! Deduplication with `dedup: {columns, within_ms}` through a real
//! cluster: of the rows with one key, the first is kept, within a batch
//! and across batches; a key is forgotten once the watermark passes its
//! event time plus `within_ms`, and its next row is kept again.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use sluice_tests::stateful::{assert_matches, batches, oracle};
use sluice_tests::{Cluster, QueryState, inputs};

const T0: i64 = 1_700_000_000_000;

fn rows(ids: &[i64], ts: impl Fn(i64) -> i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("city", DataType::Utf8, true),
    ]));
    let city: StringArray = ids.iter().map(|i| Some(format!("c{}", i % 7))).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(TimestampMillisecondArray::from(
                ids.iter().map(|&i| ts(i)).collect::<Vec<_>>(),
            )),
            Arc::new(city),
        ],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_row_of_a_key_is_kept_until_the_key_expires() {
    let cluster = Cluster::new("dedup");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let dir = cluster.root().join("in");
    std::fs::create_dir_all(&dir).unwrap();

    let first: Vec<i64> = (0..100).collect();
    // Keys 50..99 again, within a minute; 120..129 twice in one file.
    let second: Vec<i64> = (50..150).chain(120..130).collect();
    // Keys 0..9 again, long after they expired.
    let third: Vec<i64> = (0..10).collect();
    let files = [
        rows(&first, |i| T0 + i * 1000),
        rows(&second, |i| T0 + 200_000 + i * 10),
        rows(&third, |_| T0 + 10_000_000),
    ];
    for (i, b) in files.iter().enumerate() {
        inputs::write(&dir, &format!("f-{i}.jsonl"), "jsonl", b);
    }
    let sink = cluster.sink_path("dedup");
    let spec = format!(
        "name: dedup\nsource:\n  files:\n    path: {}\n    format: jsonl\n    schema:\n      - {{name: id, type: bigint}}\n      - {{name: ts, type: timestamp}}\n      - {{name: city, type: string}}\n    max_files_per_batch: 1\n    total_files: 3\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: SELECT id, ts, city FROM input\nwatermark: {{column: ts, delay_ms: 1000}}\ndedup: {{columns: [id], within_ms: 60000}}\nstate_partitions: 3\n",
        dir.display(),
        sink.display()
    );
    client.submit(&spec).await.expect("dedup submits");
    let status = client
        .wait_state("dedup", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");

    let kept = [
        rows(&first, |i| T0 + i * 1000),
        rows(&(100..150).collect::<Vec<_>>(), |i| T0 + 200_000 + i * 10),
        rows(&third, |_| T0 + 10_000_000),
    ];
    let want = oracle("SELECT id, ts, city FROM input", kept.to_vec(), &[]).await;
    let got = batches(&sink).await;
    assert_matches("dedup", "distinct", &got, &["id", "ts"], &want);
    // Keys 0..99 expired behind the watermark; 100..149 and 0..9 remain
    // after the last file, and the batch that ends the input (watermark at
    // the end of time) lets them go.
    let progress = client.progress("dedup").await.expect("progress");
    let (end, read) = progress.split_last().expect("batches");
    let last_read = read.last().expect("batches that read files");
    assert_eq!(last_read.state_rows_total, 60, "{last_read:?}");
    assert_eq!(
        (end.num_input_rows, end.state_rows_total, end.watermark_ms),
        (0, 0, Some(i64::MAX)),
        "{end:?}"
    );
}
