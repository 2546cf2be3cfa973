//! A sink may not overlap the checkpoint, even through a symbolic link:
//! a sink that is a link into another query's `offsets/` is refused at
//! submit, and one that becomes such a link after submit is refused by the
//! executor before it writes, failing only that query; the other query's
//! checkpoint holds nothing of it and it runs on.

use sluice_common::checkpoint::Log;
use std::io::ErrorKind;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_tests::{Cluster, QueryState, Spec, query_dir};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_linked_into_a_checkpoint_is_refused() {
    let cluster = Cluster::new("sink-links");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let mut client = cluster.client(&drivers);
    let victim = Spec::new("victim", &cluster.sink_path("victim"));
    client
        .submit(&victim.to_yaml())
        .await
        .expect("submit victim");
    let offsets = query_dir(&cluster.checkpoint_root(), "victim").join(Log::Offsets.dir());
    std::fs::create_dir_all(&offsets).unwrap();

    // At submit: the link exists.
    let linked = cluster.root().join("linked-sink");
    symlink(&offsets, &linked).unwrap();
    let err = client
        .submit(&Spec::new("early", &linked).to_yaml())
        .await
        .expect_err("a sink linked into a checkpoint must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("overlaps the checkpoint root"),
        "{err:?}"
    );

    // After submit: the sink's place becomes such a link before any task.
    let late = cluster.root().join("late-sink");
    client
        .submit(&Spec::new("late", &late).to_yaml())
        .await
        .expect("submit late");
    replace_with_link(&offsets, &late).await;
    let before: Vec<_> = std::fs::read_dir(&offsets)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();

    let _executor = cluster.start_executor(&drivers);
    let failed = client
        .wait_state("late", QueryState::Failed, Duration::from_secs(60))
        .await;
    assert!(
        failed.error.contains("overlaps the checkpoint root"),
        "{failed:#?}"
    );
    let foreign: Vec<_> = std::fs::read_dir(&offsets)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("part-") || n.starts_with(".part-") || n == "_sluice")
        .collect();
    assert!(
        foreign.is_empty(),
        "sink files in the checkpoint: {foreign:?} (before: {before:?})"
    );
    let committed = client
        .wait_committed("victim", 3, Duration::from_secs(60))
        .await;
    let status = client.get("victim").await.unwrap();
    assert_eq!(status.state, QueryState::Running as i32, "{status:#?}");
    assert!(committed >= 3);
}

/// Makes `link` a symbolic link to `target`. The driver opens, and so
/// creates, a query's sink directory when the query starts, which may be
/// after submit returns: the directory is awaited, removed, and the link
/// retried until it holds.
async fn replace_with_link(target: &Path, link: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !link.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    loop {
        if link.is_dir() && !link.is_symlink() {
            std::fs::remove_dir_all(link).unwrap();
        }
        match symlink(target, link) {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("linking {} to {}: {e}", link.display(), target.display()),
        }
    }
}
