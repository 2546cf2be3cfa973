//! A file sink's manifests as its readers decode them ([`decode_delta`],
//! [`decode_compact`]), and the names of the files that Sluice lists and
//! takes a batch or version from: manifests ([`ManifestName::parse`]),
//! checkpoint logs ([`parse_padded`]) and state files
//! ([`StateFile::parse`]).

use proptest::prelude::*;
use sluice_common::checkpoint::{encode, padded, parse_padded};
use sluice_common::sink::manifest::{merge, purge_candidates, purge_plan, read_plan};
use sluice_common::sink::{
    CompactManifest, ManifestName, SinkFile, SinkManifest, decode_compact, decode_delta,
};
use sluice_common::state::StateFile;

use crate::mutate::{apply_all, changes, mutated, random_bytes, random_text};
use crate::names_file;

const BATCH: u64 = 19;

fn path(name: ManifestName) -> String {
    format!("/sink/_sluice/{}", name.file_name())
}

fn manifest(batch: u64) -> SinkManifest {
    let files = (0..3)
        .map(|p| SinkFile {
            path: format!("day=2024-01-0{p}/part-{batch:020}-{p:05}.jsonl"),
            rows: 10 * batch + p,
            bytes: 1000 + p,
        })
        .collect();
    SinkManifest::new(batch, 2, files)
}

/// The delta as `write_delta` writes it, and the compacted manifest as
/// `write_compact` does.
fn seeds() -> Vec<(ManifestName, Vec<u8>)> {
    let delta = encode(&manifest(BATCH)).unwrap().to_vec();
    let compact = CompactManifest::build(BATCH, (10..=BATCH).map(manifest).collect());
    let compact = serde_json::to_vec(&compact.unwrap()).unwrap();
    vec![
        (ManifestName::Delta(BATCH), delta),
        (ManifestName::Compact(BATCH), compact),
    ]
}

/// Why a manifest may be refused beyond its JSON: the reasons of
/// `decode_delta`, `decode_compact` and [`CompactManifest::check`].
const REASONS: &[&str] = &["records batch", "out of order", "last entry", "no entry"];

fn decoded(name: ManifestName, bytes: &[u8]) -> Result<(), TestCaseError> {
    let path = path(name);
    let outcome = match name {
        ManifestName::Delta(b) => decode_delta(bytes, &path, b).map(|m| vec![m]),
        ManifestName::Compact(b) => decode_compact(bytes, &path, b).map(|c| {
            assert!(c.covers(b), "a compact read back covers its own batch");
            let names: Vec<ManifestName> = c
                .manifests
                .iter()
                .map(|m| ManifestName::Delta(m.batch_id))
                .chain([name])
                .collect();
            let plan = read_plan(&names);
            assert_eq!(plan.compacts, [b]);
            purge_plan(&purge_candidates(&names, b, 3), std::slice::from_ref(&c));
            merge(vec![c], Vec::new()).expect("one segment merges")
        }),
    };
    match outcome {
        Ok(manifests) => {
            prop_assert_eq!(manifests.last().map(|m| m.batch_id), Some(name.batch()));
            let again = serde_json::to_vec(&manifests).unwrap();
            let back: Vec<SinkManifest> = serde_json::from_slice(&again).unwrap();
            prop_assert_eq!(back, manifests);
        }
        Err(e) => {
            let text = e.to_string();
            prop_assert!(names_file(&text, &path), "{}", text);
            let located = text.contains(" line ") && text.contains(" column ");
            prop_assert!(
                located || REASONS.iter().any(|r| text.contains(r)),
                "{}",
                text
            );
        }
    }
    Ok(())
}

/// Every name parser: a name that parses is exactly the name of what it
/// parsed to, so a listing never mistakes one file for another's.
fn names_round_trip(name: &str) -> Result<(), TestCaseError> {
    if let Some(n) = parse_padded(name) {
        prop_assert_eq!(padded(n), name);
    }
    if let Some(m) = ManifestName::parse(name) {
        prop_assert_eq!(m.file_name(), name);
    }
    if let Some(f) = StateFile::parse(name) {
        prop_assert_eq!(f.name(), name);
    }
    Ok(())
}

/// Every name Sluice writes for `n`, one of them mutated.
fn any_name() -> impl Strategy<Value = String> {
    (any::<u64>(), 0..4usize, changes()).prop_map(|(n, kind, changes)| {
        let names = [
            padded(n),
            ManifestName::Compact(n).file_name(),
            StateFile::Delta(n).name(),
            StateFile::Snapshot(n).name(),
        ];
        let bytes = apply_all(names[kind].clone().into_bytes(), &changes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn random_bytes_are_refused_naming_the_manifest(compact: bool, bytes in random_bytes()) {
        let name = if compact { ManifestName::Compact(BATCH) } else { ManifestName::Delta(BATCH) };
        decoded(name, &bytes)?;
    }

    #[test]
    fn mutated_manifests_decode_whole_or_are_refused_naming_the_manifest(
        (i, bytes) in mutated(seeds().into_iter().map(|(_, seed)| seed).collect())
    ) {
        decoded(seeds()[i].0, &bytes)?;
    }

    #[test]
    fn a_name_parses_only_as_what_writes_it(name in prop_oneof![random_text(), any_name()]) {
        names_round_trip(&name)?;
    }

    #[test]
    fn every_written_name_parses_back(n: u64) {
        prop_assert_eq!(parse_padded(&padded(n)), Some(n));
        for m in [ManifestName::Delta(n), ManifestName::Compact(n)] {
            prop_assert_eq!(ManifestName::parse(&m.file_name()), Some(m));
        }
        for f in [StateFile::Delta(n), StateFile::Snapshot(n)] {
            prop_assert_eq!(StateFile::parse(&f.name()), Some(f));
        }
    }
}

#[test]
fn near_miss_names_are_not_parsed() {
    for name in [
        "+0000000000000000001",
        "-0000000000000000001",
        " 0000000000000000001",
        "99999999999999999999",
        "٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠٠١",
        "0000000000000000001\0",
    ] {
        assert_eq!(parse_padded(name), None, "{name:?}");
        assert_eq!(ManifestName::parse(name), None, "{name:?}");
        assert_eq!(
            ManifestName::parse(&format!("{name}.compact")),
            None,
            "{name:?}"
        );
        assert_eq!(StateFile::parse(&format!("{name}.delta")), None, "{name:?}");
    }
}

#[test]
fn a_manifest_of_another_batch_or_out_of_order_is_refused() {
    let err = decode_delta(&seeds()[0].1, "/sink/_sluice/x", 3).unwrap_err();
    assert!(err.to_string().contains("records batch 19"), "{err}");
    let mut c = CompactManifest::build(2, (0..=2).map(manifest).collect()).unwrap();
    c.manifests.swap(0, 1);
    let err = decode_compact(&serde_json::to_vec(&c).unwrap(), "/sink/_sluice/y", 2).unwrap_err();
    assert!(
        err.to_string()
            .contains("out of order: batch 1 before batch 0"),
        "{err}"
    );
    let deep = format!("{{\"manifests\": [{{\"x\": {}", "[".repeat(10_000));
    let err = decode_compact(deep.as_bytes(), "/sink/_sluice/z", 2).unwrap_err();
    assert!(
        err.to_string()
            .contains("EOF while parsing a list at line 1"),
        "{err}"
    );
}
