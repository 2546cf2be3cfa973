use super::*;

fn m(batch: u64) -> SinkManifest {
    SinkManifest::new(batch, 1, Vec::new())
}

/// The segment ending at `upto` that starts at `from`.
fn segment(from: u64, upto: u64) -> CompactManifest {
    CompactManifest::build(upto, (from..=upto).map(m).collect()).unwrap()
}

/// Every delta of batches `0..=last` and the compacted manifests of
/// every batch that compacts up to `last`.
fn names(last: u64, interval: u64) -> Vec<ManifestName> {
    let mut out: Vec<ManifestName> = (0..=last).map(ManifestName::Delta).collect();
    out.extend(
        (0..=last)
            .filter(|&b| compacts_at(b, interval))
            .map(ManifestName::Compact),
    );
    out
}

#[test]
fn every_interval_th_batch_compacts_after_the_previous_compact() {
    let at: Vec<u64> = (0..35).filter(|&b| compacts_at(b, 10)).collect();
    assert_eq!(at, [9, 19, 29]);
    assert_eq!(previous_compact(9, 10), None);
    assert_eq!(previous_compact(19, 10), Some(9));
    assert_eq!(previous_compact(29, 10), Some(19));
    assert!((0..5).all(|b| compacts_at(b, 1)));
    assert_eq!(previous_compact(4, 1), Some(3));
    assert!(!(0..100).any(|b| compacts_at(b, 0)), "0 turns it off");
}

#[test]
fn a_segment_starts_after_the_latest_compact_or_at_the_first_delta() {
    assert_eq!(segment_start(&names(28, 10), 29), 20);
    // The interval changed from 10 to 7: batch 20 follows 19.compact.
    assert_eq!(segment_start(&names(19, 10), 20), 20);
    // A sink written before compaction, from batch 3 on.
    let plain: Vec<ManifestName> = (3..29).map(ManifestName::Delta).collect();
    assert_eq!(segment_start(&plain, 29), 3);
    assert_eq!(segment_start(&[], 9), 9);
    // Names of later batches (a replay's) do not count.
    let mut later = names(28, 10);
    later.push(ManifestName::Compact(39));
    assert_eq!(segment_start(&later, 29), 20);
}

#[test]
fn names_round_trip_and_strangers_are_refused() {
    for n in [ManifestName::Delta(7), ManifestName::Compact(19)] {
        assert_eq!(ManifestName::parse(&n.file_name()), Some(n));
    }
    assert_eq!(
        ManifestName::Compact(19).file_name(),
        "00000000000000000019.compact"
    );
    for bad in ["7", "7.compact", "0000000000000000001x", "x.compact", ""] {
        assert_eq!(ManifestName::parse(bad), None, "{bad}");
    }
}

#[test]
fn a_reader_reads_every_segment_and_the_deltas_after_the_latest() {
    let plan = read_plan(&names(24, 10));
    assert_eq!(plan.compacts, [9, 19]);
    assert_eq!(plan.deltas, [20, 21, 22, 23, 24]);
    // Without a compacted manifest: every delta, as before compaction.
    let plain: Vec<ManifestName> = (0..4).rev().map(ManifestName::Delta).collect();
    assert_eq!(
        read_plan(&plain),
        ReadPlan {
            compacts: vec![],
            deltas: vec![0, 1, 2, 3]
        }
    );
    assert_eq!(read_plan(&[]), ReadPlan::default());
}

#[test]
fn segments_merge_in_batch_order_and_old_style_overlaps_must_agree() {
    let all: Vec<SinkManifest> = (0..25).map(m).collect();
    let got = merge(
        vec![segment(10, 19), segment(0, 9)],
        (20..25).map(m).collect(),
    );
    assert_eq!(got.unwrap(), all);
    // Compacted manifests written before segments restate every batch
    // from the first; the segments after them start where they end.
    let old = vec![segment(0, 9), segment(0, 19), segment(20, 24)];
    assert_eq!(merge(old, Vec::new()).unwrap(), all);
    let mut other = segment(0, 19);
    other.manifests[3].epoch = 2;
    let err = merge(vec![segment(0, 9), other], Vec::new()).unwrap_err();
    assert_eq!(err.compact, 19);
    assert!(
        err.reason
            .contains("lists batch 3 unlike 00000000000000000009.compact"),
        "{}",
        err.reason
    );
}

#[test]
fn a_segment_holds_its_deltas_in_order_ending_at_its_batch() {
    let c = segment(10, 19);
    assert_eq!(c.manifests.len(), 10);
    assert!(c.covers(10) && c.covers(19) && !c.covers(9) && !c.covers(20));
    let err = CompactManifest::build(19, vec![m(12), m(11), m(19)]);
    assert!(err.unwrap_err().contains("out of order"));
    let err = CompactManifest::build(19, vec![m(10)]);
    assert!(err.unwrap_err().contains("last entry is batch 10"));
    assert!(CompactManifest::build(19, vec![]).is_err());
}

#[test]
fn a_purge_deletes_old_deltas_that_their_segment_lists_and_keeps_segments() {
    let all = names(499, 10);
    let candidates = purge_candidates(&all, 499, 100);
    assert_eq!(candidates.len(), 40, "the segments 9, 19, .., 399");
    assert_eq!(candidates[&19], (10..20).collect::<Vec<_>>());
    let segments: Vec<CompactManifest> = (0..50).map(|k| segment(k * 10, k * 10 + 9)).collect();
    let purged = purge_plan(&candidates, &segments);
    let want: Vec<ManifestName> = (0..400).map(ManifestName::Delta).collect();
    assert_eq!(purged, want);
    // A segment not read back, or one that lacks a delta, keeps it.
    let mut partial: Vec<CompactManifest> = segments.clone();
    partial[4].manifests.retain(|m| m.batch_id != 45);
    partial.remove(1);
    let purged = purge_plan(&candidates, &partial);
    assert_eq!(purged.len(), 400 - 10 - 1);
    assert!(!purged.contains(&ManifestName::Delta(15)));
    assert!(!purged.contains(&ManifestName::Delta(45)));
}

#[test]
fn a_purge_never_touches_what_no_segment_up_to_committed_covers() {
    // Deltas up to 27 and 29.compact, a purge after 27 with a retain of 1:
    // 20..=26 have no segment up to 27.
    let mut all = names(27, 10);
    all.push(ManifestName::Compact(29));
    let candidates = purge_candidates(&all, 27, 1);
    assert_eq!(candidates.keys().copied().collect::<Vec<_>>(), [9, 19]);
    assert!(candidates.values().flatten().all(|&d| d < 20));
    // A retain window longer than the log deletes nothing.
    assert!(purge_candidates(&names(29, 10), 29, 100).is_empty());
    // Nor does a log without segments.
    let plain: Vec<ManifestName> = (0..50).map(ManifestName::Delta).collect();
    assert!(purge_candidates(&plain, 49, 1).is_empty());
}
