//! What a submit refuses up front, with `INVALID_ARGUMENT` and a message a
//! user can act on, before anything is written:
//! - a spec larger than the limit names the limit and the size, through
//!   gRPC and through `sluice submit`;
//! - a sink that overlaps another query's sink, or the checkpoint root,
//!   names the other query or the checkpoint, after `..` and `.` are
//!   normalized.

use sluice_common::checkpoint::QUERIES_DIR;
use sluice_tests::{Cluster, Spec};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_spec_is_invalid_naming_the_limit_and_the_size() {
    let cluster = Cluster::new("oversized-spec");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let mut yaml = Spec::new("big", &cluster.sink_path("big")).to_yaml();
    // A 1.5 MB comment: valid YAML, over the 1 MiB spec limit, under the
    // 2 MiB message limit (a larger message is refused by the codec).
    yaml.push_str(&format!("# {}\n", "x".repeat(3 << 19)));
    let size = yaml.len().to_string();

    let err = cluster
        .client(&drivers)
        .submit(&yaml)
        .await
        .expect_err("a 1.5 MB spec must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("1048576") && err.message().contains(&size),
        "the message must name the limit and the size ({size}): {err:?}"
    );

    let file = cluster.write_spec(&yaml);
    let out = cluster
        .cli(&drivers, &["submit", file.to_str().unwrap()])
        .await;
    out.assert_failure();
    assert!(
        out.stderr.contains("1048576") && out.stderr.contains(&size),
        "sluice submit must name the limit and the size: {out}"
    );

    // Nothing was created, and the driver still serves.
    let list = cluster.client(&drivers).list().await.unwrap();
    assert!(list.is_empty(), "{list:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sinks_and_the_checkpoint_are_refused_naming_them() {
    let cluster = Cluster::new("overlap");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path("first");
    client
        .submit(&Spec::new("first", &sink).to_yaml())
        .await
        .expect("the first query is accepted");

    let checkpoint = cluster.checkpoint_root();
    let cases = [
        ("the same sink", sink.clone(), "first"),
        ("the same sink through ..", sink.join("x/../."), "first"),
        ("a sink inside it", sink.join("inner"), "first"),
        (
            "a sink around it",
            sink.parent().unwrap().to_path_buf(),
            "first",
        ),
        ("the checkpoint root", checkpoint.clone(), "checkpoint"),
        (
            "inside a query's checkpoint directory",
            checkpoint.join(QUERIES_DIR).join("first/out"),
            "checkpoint",
        ),
    ];
    for (i, (label, path, named)) in cases.into_iter().enumerate() {
        let name = format!("second-{i}");
        let err = client
            .submit(&Spec::new(&name, &path).to_yaml())
            .await
            .expect_err(&format!("{label}: must be refused"));
        assert_eq!(err.code(), Code::InvalidArgument, "{label}: {err:?}");
        assert!(
            err.message().contains("sink.files.path") && err.message().contains(named),
            "{label}: the message must name the field and {named}: {err:?}"
        );
    }

    // A sibling directory is fine.
    client
        .submit(&Spec::new("sibling", &cluster.sink_path("first-2")).to_yaml())
        .await
        .expect("a sibling sink is accepted");
    let names: Vec<String> = client
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(names, ["first", "sibling"]);
}
