use super::*;
use crate::sink::manifest::SinkFile;

fn open() -> (tempfile::TempDir, Storage) {
    crate::sink::temp_storage()
}

fn manifest(batch: u64) -> SinkManifest {
    let file = SinkFile {
        path: format!("part-{batch:020}-00000.jsonl"),
        rows: batch,
        bytes: batch + 1,
    };
    SinkManifest::new(batch, 1, vec![file])
}

/// Commits batches `batches` as the driver does: the delta, then the
/// compacted manifest when the batch compacts.
async fn commit(storage: &Storage, batches: std::ops::Range<u64>, interval: u64) {
    for b in batches {
        let stored = write_delta(storage, &manifest(b)).await.unwrap();
        let compacts = write_compact(storage, &stored, interval).await.unwrap();
        assert_eq!(compacts, compacts_at(b, interval), "batch {b}");
    }
}

/// The file names under `_sluice/`.
fn files(dir: &tempfile::TempDir) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir.path().join(MANIFEST_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

fn all(batches: std::ops::Range<u64>) -> Vec<SinkManifest> {
    batches.map(manifest).collect()
}

#[tokio::test]
async fn a_sink_without_compacted_manifests_reads_every_delta() {
    let (_dir, storage) = open();
    assert_eq!(read(&storage).await.unwrap(), []);
    commit(&storage, 0..25, 0).await;
    assert_eq!(read(&storage).await.unwrap(), all(0..25));
}

#[tokio::test]
async fn every_interval_th_batch_compacts_and_readers_see_every_batch() {
    let (dir, storage) = open();
    commit(&storage, 0..25, 10).await;
    let names = files(&dir);
    assert!(names.contains(&"00000000000000000009.compact".to_string()));
    assert!(names.contains(&"00000000000000000019.compact".to_string()));
    assert_eq!(names.len(), 25 + 2);
    assert_eq!(read(&storage).await.unwrap(), all(0..25));
    // Each segment holds only the batches since the previous one.
    let c = read_compact(&storage, 19).await.unwrap().unwrap();
    assert_eq!(c.manifests, all(10..20));
    // A reader needs only the segments and the deltas after the latest.
    for b in 0..20 {
        storage.delete(&path(ManifestName::Delta(b))).await.unwrap();
    }
    assert_eq!(read(&storage).await.unwrap(), all(0..25));
}

#[tokio::test]
async fn a_replay_adopts_its_compacted_manifest_and_a_different_one_conflicts() {
    let (dir, storage) = open();
    commit(&storage, 0..20, 10).await;
    // A restarted driver that re-runs batch 19 builds the same one.
    assert!(write_compact(&storage, &manifest(19), 10).await.unwrap());
    // A 29.compact that lacks batch 20.
    let other = CompactManifest::build(29, all(21..30)).unwrap();
    std::fs::write(
        dir.path().join(MANIFEST_DIR).join(padded_compact(29)),
        serde_json::to_vec(&other).unwrap(),
    )
    .unwrap();
    commit(&storage, 20..29, 10).await;
    let stored = write_delta(&storage, &manifest(29)).await.unwrap();
    let err = write_compact(&storage, &stored, 10).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("00000000000000000029.compact"));
}

fn padded_compact(batch: u64) -> String {
    ManifestName::Compact(batch).file_name()
}

#[tokio::test]
async fn a_sink_written_before_compaction_compacts_from_its_listing() {
    let (_dir, storage) = open();
    commit(&storage, 0..21, 0).await;
    // Batch 29 finds no 19.compact to build on.
    commit(&storage, 21..30, 10).await;
    let c = read_compact(&storage, 29).await.unwrap().unwrap();
    assert_eq!(c.manifests, all(0..30));
    assert_eq!(read(&storage).await.unwrap(), all(0..30));
    // Then segments again.
    commit(&storage, 30..40, 10).await;
    let c = read_compact(&storage, 39).await.unwrap().unwrap();
    assert_eq!(c.manifests, all(30..40));
    assert_eq!(read(&storage).await.unwrap(), all(0..40));
}

#[tokio::test]
async fn a_sink_with_old_style_compacts_reads_whole_and_goes_on_in_segments() {
    let (dir, storage) = open();
    commit(&storage, 0..20, 0).await;
    // As compaction wrote before segments: 9 and 19 restate from batch 0.
    for upto in [9, 19] {
        let old = CompactManifest::build(upto, all(0..upto + 1)).unwrap();
        std::fs::write(
            dir.path().join(MANIFEST_DIR).join(padded_compact(upto)),
            serde_json::to_vec(&old).unwrap(),
        )
        .unwrap();
    }
    commit(&storage, 20..30, 10).await;
    assert_eq!(
        read_compact(&storage, 29).await.unwrap().unwrap().manifests,
        all(20..30)
    );
    purge(&storage, 29, 5).await.unwrap();
    assert_eq!(read(&storage).await.unwrap(), all(0..30));
    // An old-style compact that disagrees with another is damage, named.
    let mut bad = CompactManifest::build(19, all(0..20)).unwrap();
    bad.manifests[4].epoch = 7;
    std::fs::write(
        dir.path().join(MANIFEST_DIR).join(padded_compact(19)),
        serde_json::to_vec(&bad).unwrap(),
    )
    .unwrap();
    let err = read(&storage).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("00000000000000000019.compact"), "{text}");
    assert!(text.contains("lists batch 4 unlike"), "{text}");
}

#[tokio::test]
async fn segments_keep_the_bytes_written_linear_in_the_batches() {
    let (dir, storage) = open();
    commit(&storage, 0..1000, 10).await;
    let sizes: Vec<u64> = (0..100)
        .map(|k| {
            let name = padded_compact(k * 10 + 9);
            std::fs::metadata(dir.path().join(MANIFEST_DIR).join(name))
                .unwrap()
                .len()
        })
        .collect();
    // Every segment holds ten batches: the last is no larger than the first
    // but for the width of the numbers in it.
    let (first, last) = (sizes[0], sizes[99]);
    assert!(last < first + 200, "segment sizes grew: {first} .. {last}");
    assert_eq!(read(&storage).await.unwrap(), all(0..1000));
}

#[tokio::test]
async fn a_missing_committed_delta_is_damage_named_by_file() {
    let (_dir, storage) = open();
    commit(&storage, 0..9, 10).await;
    storage.delete(&path(ManifestName::Delta(4))).await.unwrap();
    let stored = write_delta(&storage, &manifest(9)).await.unwrap();
    let err = write_compact(&storage, &stored, 10).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("00000000000000000004"), "{err}");
}

#[tokio::test]
async fn a_stranger_under_the_manifest_directory_is_damage() {
    let (dir, storage) = open();
    commit(&storage, 0..2, 10).await;
    std::fs::write(dir.path().join(MANIFEST_DIR).join("notes.txt"), "x").unwrap();
    let err = read(&storage).await.unwrap_err();
    assert!(err.to_string().contains("notes.txt"), "{err}");
}

#[tokio::test]
async fn purges_keep_the_segments_and_the_retain_window() {
    let (dir, storage) = open();
    let (interval, retain) = (10, 20);
    for b in 0..125 {
        commit(&storage, b..b + 1, interval).await;
        // The driver's retention: after each batch that compacts.
        if compacts_at(b, interval) {
            purge(&storage, b, retain).await.unwrap();
        }
        let segments = (b + 1) / interval;
        let n = files(&dir).len() as u64 - segments;
        assert!(n <= retain + interval, "{n} deltas after batch {b}");
        if b >= retain + interval && compacts_at(b, interval) {
            assert_eq!(n, retain, "{n} deltas after batch {b}");
        }
    }
    let mut want: Vec<String> = (0..12).map(|k| padded_compact(k * 10 + 9)).collect();
    want.extend((100..125).map(|b| format!("{b:020}")));
    want.sort();
    assert_eq!(files(&dir), want);
    assert_eq!(read(&storage).await.unwrap(), all(0..125));
    // Later, the deltas that left the window go, and only those; a purge
    // before any compacted manifest deletes nothing.
    assert_eq!(purge(&storage, 124, retain).await.unwrap(), 5);
    assert_eq!(purge(&storage, 124, retain).await.unwrap(), 0);
    let (_d, fresh) = open();
    commit(&fresh, 0..5, interval).await;
    assert_eq!(purge(&fresh, 4, 1).await.unwrap(), 0);
}

#[tokio::test]
async fn a_reader_lists_again_when_a_listed_file_is_purged() {
    let (_dir, storage) = open();
    commit(&storage, 0..19, 10).await;
    let stale = list(&storage).await.unwrap();
    commit(&storage, 19..20, 10).await;
    assert_eq!(purge(&storage, 19, 1).await.unwrap(), 19);
    // The listing taken before the purge names delta 10, which is gone.
    assert_eq!(
        read_listed(&storage, &stale).await.unwrap(),
        Listed::Gone(ManifestName::Delta(10))
    );
    assert_eq!(read(&storage).await.unwrap(), all(0..20));
    // A delta listed before any segment, then purged, the same way.
    let (_dir, storage) = open();
    commit(&storage, 0..19, 0).await;
    let stale = list(&storage).await.unwrap();
    commit(&storage, 19..20, 10).await;
    purge(&storage, 19, 1).await.unwrap();
    assert_eq!(
        read_listed(&storage, &stale).await.unwrap(),
        Listed::Gone(ManifestName::Delta(0))
    );
    assert_eq!(read(&storage).await.unwrap(), all(0..20));
}
