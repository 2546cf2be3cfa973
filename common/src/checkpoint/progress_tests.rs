//! The tests of `progress/<N>` records: from and to the published
//! progress, older records, and the history read back from storage.

use super::*;
use crate::checkpoint::{Log, QUERIES_DIR};

#[test]
fn a_record_gives_back_the_progress_it_was_made_from() {
    let p = pb::BatchProgress {
        id: "id-1".into(),
        name: "q".into(),
        batch_id: 7,
        num_input_rows: 1000,
        input_rows_per_second: 123.5,
        processed_rows_per_second: 4567.25,
        duration_ms: Some(pb::Durations {
            latest_offset: 1,
            wal_commit: 2,
            execution: 30,
            sink_commit: 4,
            commit: 5,
            total: 42,
            map: 10,
            reduce: 20,
        }),
        timestamp_ms: 1_700_000_000_000,
        epoch: 3,
        skipped_before: 0,
        bad_records: 2,
        state_rows_total: 50,
        state_bytes: 4096,
        state_expired: 3,
        watermark_ms: Some(1_699_999_990_000),
        rows_dropped_by_watermark: 6,
        records_lost: 9,
        num_output_rows: 10,
        sink_bytes: 11,
        kafka_transactions: Some(pb::KafkaTransactions {
            committed: 4,
            aborted: 1,
            longest_ms: 250,
        }),
        partitions: vec![pb::PartitionProgress {
            topic: "events".into(),
            partition: 3,
            start_offset: 10,
            end_offset: 25,
            latest_offset: 40,
            lag: 15,
        }],
        state_operators: vec![
            pb::OperatorState {
                name: "aggregate".into(),
                rows: 30,
                bytes: 3000,
            },
            pb::OperatorState {
                name: "aggregate-2".into(),
                rows: 20,
                bytes: 1096,
            },
        ],
        rows_without_event_time: 5,
        state_rebuild: Some(pb::StateRebuild {
            partitions: 5,
            partitions_read: 20,
            rows: 7,
            duration_ms: 80,
        }),
    };
    let record = ProgressRecord::from_proto(&p);
    let json = serde_json::to_vec(&record).unwrap();
    let back: ProgressRecord = serde_json::from_slice(&json).unwrap();
    assert_eq!(back.to_proto("id-1", "q"), p);
}

#[test]
fn a_query_without_a_watermark_stores_none() {
    let record = ProgressRecord::from_proto(&pb::BatchProgress::default());
    let json = String::from_utf8(serde_json::to_vec(&record).unwrap()).unwrap();
    assert!(!json.contains("watermark_ms"), "{json}");
    let back: ProgressRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(back.watermark_ms, None);
}

#[test]
fn a_record_written_before_operator_state_was_kept_reads_without_it() {
    let json = r#"{"version":1,"batch_id":4,"epoch":2,"num_input_rows":10,
        "input_rows_per_second":1.0,"processed_rows_per_second":2.0,
        "duration_ms":{"latest_offset":0,"wal_commit":0,"execution":0,"sink_commit":0,
        "commit":0,"total":3},"timestamp_ms":0,"state_rows_total":7,"state_bytes":70}"#;
    let record: ProgressRecord = serde_json::from_str(json).unwrap();
    assert_eq!(record.state_rows_total, 7);
    assert!(record.state_operators.is_empty());
    assert!(record.to_proto("id", "q").state_operators.is_empty());
    // A stateless query's record does not mention them.
    let json = serde_json::to_string(&record).unwrap();
    assert!(!json.contains("state_operators"), "{json}");
}

#[tokio::test]
async fn the_recent_records_are_read_back_and_old_ones_purged() {
    use crate::checkpoint::{Checkpoint, padded};
    use crate::storage::Stores;

    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
    let q = cp.query("q");
    for n in 0..6u64 {
        let p = pb::BatchProgress {
            name: "q".into(),
            batch_id: n,
            num_input_rows: n * 10,
            ..Default::default()
        };
        q.write_progress(&ProgressRecord::from_proto(&p))
            .await
            .unwrap();
    }
    // A second report of a batch leaves the first in place.
    let again = pb::BatchProgress {
        name: "q".into(),
        batch_id: 5,
        num_input_rows: 999,
        ..Default::default()
    };
    q.write_progress(&ProgressRecord::from_proto(&again))
        .await
        .unwrap();
    std::fs::write(
        dir.path()
            .join(QUERIES_DIR)
            .join("q")
            .join(Log::Progress.entry(4)),
        b"{trunc",
    )
    .unwrap();

    let recent = q.recent_progress(3).await.unwrap();
    let got: Vec<(u64, u64)> = recent
        .records
        .iter()
        .map(|r| (r.batch_id, r.num_input_rows))
        .collect();
    assert_eq!(got, [(3, 30), (5, 50)]);
    assert_eq!(recent.damaged.len(), 1);
    let damaged = recent.damaged[0].to_string();
    assert!(damaged.contains(&padded(4)), "{damaged}");

    assert_eq!(q.purge_progress_before(3).await.unwrap(), 3);
    assert_eq!(q.batches(Log::Progress).await.unwrap(), [3, 4, 5]);
    // The other logs are not touched by it, nor it by theirs.
    assert_eq!(q.purge_before(10).await.unwrap(), 0);
    assert_eq!(q.batches(Log::Progress).await.unwrap(), [3, 4, 5]);

    // A valid record copied to another batch's place, or from another
    // query, is damage too.
    let progress = dir
        .path()
        .join(QUERIES_DIR)
        .join("q")
        .join(Log::Progress.dir());
    std::fs::copy(progress.join(padded(5)), progress.join(padded(4))).unwrap();
    let other = cp.query("other");
    let theirs = pb::BatchProgress {
        name: "other".into(),
        batch_id: 3,
        ..Default::default()
    };
    other
        .write_progress(&ProgressRecord::from_proto(&theirs))
        .await
        .unwrap();
    std::fs::copy(
        dir.path()
            .join(QUERIES_DIR)
            .join("other")
            .join(Log::Progress.entry(3)),
        progress.join(padded(3)),
    )
    .unwrap();
    let recent = q.recent_progress(3).await.unwrap();
    let got: Vec<u64> = recent.records.iter().map(|r| r.batch_id).collect();
    assert_eq!(got, [5]);
    let damaged: Vec<String> = recent.damaged.iter().map(|e| e.to_string()).collect();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    assert!(
        damaged[0].contains("query \"other\", batch 3"),
        "{damaged:?}"
    );
    assert!(
        damaged[1].contains("batch 5, not of query \"q\", batch 4"),
        "{damaged:?}"
    );
}
