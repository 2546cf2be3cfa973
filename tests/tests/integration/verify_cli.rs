//! `sluice verify`, the binary that deploy/'s verify Jobs run: on a correct
//! sink it prints zero missing and zero duplicated rows and exits 0; a
//! missing row or a duplicated row makes it exit 1 with that count; a sink
//! that does not exist is an error (not an empty, "exact" sink).

use std::path::Path;

use sluice_common::rate::generate;
use sluice_common::sink::{FileSink, encode_jsonl};
use sluice_tests::{CliOutput, Cluster};

/// Writes one committed batch per entry of `batches`; each entry lists
/// the value ranges of its part files.
async fn write_sink(path: &Path, batches: &[&[(u64, u64)]]) {
    std::fs::create_dir_all(path).unwrap();
    let sink = FileSink::open(&Default::default(), path.to_str().unwrap()).unwrap();
    for (batch, ranges) in batches.iter().enumerate() {
        let mut files = Vec::new();
        for (p, &(start, end)) in ranges.iter().enumerate() {
            let rows = generate(0, 1, 1000, 0, start, end).unwrap();
            let data = encode_jsonl(&rows).unwrap();
            files.push(
                sink.write_part(batch as u64, p as u32, end - start, data)
                    .await
                    .unwrap(),
            );
        }
        sink.write_manifest(&FileSink::manifest(batch as u64, 1, files))
            .await
            .unwrap();
    }
}

async fn verify(cluster: &Cluster, sink: &Path, total: u64) -> CliOutput {
    // `verify` reads the sink only; the driver address is never dialled.
    cluster
        .cli(
            "127.0.0.1:1",
            &[
                "verify",
                "--sink",
                sink.to_str().unwrap(),
                "--total-rows",
                &total.to_string(),
            ],
        )
        .await
}

fn count(out: &CliOutput, key: &str) -> u64 {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no `{key}:` line: {out}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("`{key}:` is not a number: {out}"))
}

#[tokio::test]
async fn verify_exits_zero_only_on_an_exact_sink() {
    let cluster = Cluster::new("verify-cli");

    let exact = cluster.sink_path("exact");
    write_sink(&exact, &[&[(0, 50), (50, 100)], &[(100, 200)]]).await;
    let out = verify(&cluster, &exact, 200).await;
    out.assert_code(0);
    assert_eq!(
        (count(&out, "missing"), count(&out, "duplicated")),
        (0, 0),
        "{out}"
    );
    assert_eq!(count(&out, "rows"), 200, "{out}");

    let missing = cluster.sink_path("missing");
    write_sink(&missing, &[&[(0, 50), (50, 100)], &[(100, 199)]]).await;
    let out = verify(&cluster, &missing, 200).await;
    out.assert_code(1);
    assert_eq!(
        (count(&out, "missing"), count(&out, "duplicated")),
        (1, 0),
        "{out}"
    );

    let duplicated = cluster.sink_path("duplicated");
    write_sink(
        &duplicated,
        &[&[(0, 50), (50, 100)], &[(100, 200), (199, 200)]],
    )
    .await;
    let out = verify(&cluster, &duplicated, 200).await;
    out.assert_code(1);
    assert_eq!(
        (count(&out, "missing"), count(&out, "duplicated")),
        (0, 1),
        "{out}"
    );

    // The rows are all there, but the check expects more of them.
    let out = verify(&cluster, &exact, 201).await;
    out.assert_code(1);
    assert_eq!(count(&out, "missing"), 1, "{out}");

    let nowhere = cluster.sink_path("nowhere");
    let out = verify(&cluster, &nowhere, 10).await;
    out.assert_failure();
    assert!(!nowhere.exists(), "verify must not create the sink");
}
