//! Every bad input of issue 2, point 6, gets a clear error and loses
//! nothing: invalid specs (INVALID_ARGUMENT naming the field), a name in
//! use (ALREADY_EXISTS), a changed spec (FAILED_PRECONDITION naming what
//! differs), a garbled checkpoint file (only that query fails, nothing is
//! deleted) and a sink that can never be written (refused at submit when
//! that can be known then, else FAILED at once naming the path).

use sluice_common::checkpoint::Log;
use std::time::{Duration, Instant};

use sluice_tests::{
    Cluster, QueryState, Spec, assert_exactly_once, files_under, latest_entry, query_dir,
};
use tonic::Code;

/// Submits `yaml` through the CLI and gRPC; both must refuse it with
/// INVALID_ARGUMENT and a message that contains `field`.
async fn assert_invalid(cluster: &Cluster, drivers: &str, label: &str, yaml: &str, field: &str) {
    let file = cluster.write_spec(yaml);
    let out = cluster
        .cli(drivers, &["submit", file.to_str().unwrap()])
        .await;
    out.assert_failure();
    assert!(
        out.stderr.contains(field),
        "{label}: stderr must name {field}: {out}"
    );

    let err = cluster
        .client(drivers)
        .submit(yaml)
        .await
        .expect_err(&format!("{label}: gRPC submit must fail"));
    assert_eq!(err.code(), Code::InvalidArgument, "{label}: {err:?}");
    assert!(
        err.message().contains(field),
        "{label}: message must name {field}: {err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_are_rejected_naming_the_field() {
    let cluster = Cluster::new("bad-spec");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let good = Spec::new("bad", &cluster.sink_path("bad"))
        .total_rows(100)
        .to_yaml();
    assert!(good.contains("    partitions: 4\n"));

    let cases = [
        (
            "malformed YAML (an unclosed flow sequence)",
            good.replace("partitions: 4", "partitions: [4"),
            "source.rate.partitions",
        ),
        (
            "unknown field",
            good.replace(
                "    partitions: 4\n",
                "    partitions: 4\n    colour: red\n",
            ),
            "source.rate.colour",
        ),
        (
            "out-of-range value",
            good.replace("partitions: 4", "partitions: 0"),
            "source.rate.partitions",
        ),
    ];
    for (label, yaml, field) in &cases {
        assert_invalid(&cluster, &drivers, label, yaml, field).await;
    }
    assert!(
        !query_dir(&cluster.checkpoint_root(), "bad").exists(),
        "a rejected spec leaves no checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_in_use_and_a_changed_spec_are_refused() {
    let cluster = Cluster::new("dup");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let spec = Spec::new("dup", &cluster.sink_path("dup")).total_rows(1000);
    let mut client = cluster.client(&drivers);
    let id = client
        .submit(&spec.to_yaml())
        .await
        .expect("first submit")
        .id;

    let err = client
        .submit(&spec.to_yaml())
        .await
        .expect_err("same spec again");
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    let file = cluster.write_spec(&spec.to_yaml());
    let out = cluster
        .cli(&drivers, &["submit", file.to_str().unwrap()])
        .await;
    out.assert_failure();

    let changed = spec.clone().partitions(8).to_yaml();
    let err = client.submit(&changed).await.expect_err("changed spec");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("source.rate.partitions"), "{err:?}");
    let file = cluster.write_spec(&changed);
    let out = cluster
        .cli(&drivers, &["submit", file.to_str().unwrap()])
        .await;
    out.assert_failure();
    assert!(out.stderr.contains("source.rate.partitions"), "{out}");

    let status = client.get("dup").await.expect("get");
    assert_eq!(status.id, id, "the original query is untouched");
    assert_ne!(status.state, QueryState::Failed as i32, "{status:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_commit_fails_only_its_query_and_deletes_nothing() {
    let cluster = Cluster::new("garbled");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let sink_b = cluster.sink_path("b");
    let a = Spec::new("a", &cluster.sink_path("a"))
        .partitions(2)
        .interval_ms(50);
    let b = Spec::new("b", &sink_b)
        .rows_per_second(1500)
        .total_rows(6000)
        .interval_ms(50);
    client.submit(&a.to_yaml()).await.expect("submit a");
    client.submit(&b.to_yaml()).await.expect("submit b");
    client.wait_committed("a", 1, Duration::from_secs(30)).await;
    client.wait_committed("b", 0, Duration::from_secs(30)).await;

    driver.kill();
    let root = cluster.checkpoint_root();
    let (n, garbled) = latest_entry(&root, "a", Log::Commits).expect("a has commits");
    std::fs::write(&garbled, "{\"trunc").expect("garble the commit");
    let before = files_under(&query_dir(&root, "a"));
    eprintln!(
        "garbled {} ({} files under a)",
        garbled.display(),
        before.len()
    );
    driver.restart_ready().await;

    let failed = client
        .wait_state("a", QueryState::Failed, Duration::from_secs(30))
        .await;
    let file_name = Log::Commits.entry(n);
    assert!(
        failed.error.contains(&file_name),
        "the error names {file_name}: {failed:#?}"
    );
    client
        .wait_state("b", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert_exactly_once(&sink_b, 6000).await;

    let status = client.get("a").await.expect("get a");
    assert_eq!(status.state, QueryState::Failed as i32, "{status:#?}");
    assert_eq!(
        std::fs::read(&garbled).unwrap(),
        b"{\"trunc",
        "left as it was"
    );
    for f in &before {
        assert!(f.exists(), "{} was deleted", f.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_can_never_work_is_refused_or_fails_naming_the_path() {
    let cluster = Cluster::new("unwritable");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);

    // Known at submit: a regular file where the sink directory should be,
    // and a virtual filesystem.
    let file = cluster.sink_path("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    for (label, path, named) in [
        ("an existing file", file.clone(), file.to_str().unwrap()),
        ("under /proc", "/proc/sluice-out".into(), "/proc"),
    ] {
        let err = client
            .submit(&Spec::new("refused", &path).to_yaml())
            .await
            .expect_err(label);
        assert_eq!(err.code(), Code::InvalidArgument, "{label}: {err:?}");
        assert!(
            err.message().contains("sink.files.path") && err.message().contains(named),
            "{label}: {err:?}"
        );
    }

    // Known only when writing: the sink directory becomes a file while the
    // query runs (ENOTDIR, even as root). The query fails at once, naming
    // the path, instead of retrying forever.
    let sink = cluster.sink_path("blocked");
    let spec = Spec::new("blocked", &sink)
        .partitions(2)
        .rows_per_second(2000)
        .interval_ms(100);
    client.submit(&spec.to_yaml()).await.expect("submit");
    client
        .wait_committed("blocked", 1, Duration::from_secs(30))
        .await;
    let moved = cluster.sink_path("blocked-moved");
    std::fs::rename(&sink, &moved).unwrap();
    std::fs::write(&sink, "not a directory").unwrap();
    let failed_by = Instant::now() + Duration::from_secs(20);
    let status = client
        .wait_state("blocked", QueryState::Failed, Duration::from_secs(20))
        .await;
    assert!(Instant::now() < failed_by);
    assert!(
        status.error.contains(sink.to_str().unwrap()),
        "the error names the sink: {status:#?}"
    );
    let out = cluster
        .cli(&drivers, &["status", "blocked", "--json"])
        .await;
    out.assert_success();
    assert_eq!(out.json()["state"], "FAILED", "{out}");

    // What was committed before is all there, once.
    assert!(status.committed_rows > 0, "{status:#?}");
    assert_exactly_once(&moved, status.committed_rows).await;
}
